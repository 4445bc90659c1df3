from dtr_trainer.main import cli

cli()
