"""The `dtr` command (cli.py): one module per verb, over the client library (dtr_client) and the operator's
API (dtr_operator); command.py holds what they share, the way from an error to an exit code and to the client.
"""
