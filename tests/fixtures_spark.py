"""The one session-scoped SparkSession (with Delta) shared by every test that needs it."""
