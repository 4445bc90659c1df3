"""The mlflow tier (make test-mlflow; docs/tracking.md#tests): one real MLflow server for all its tests."""

from support.mlflow_server import server_fixture

mlflow_server = server_fixture()
