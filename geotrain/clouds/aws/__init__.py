"""AWS as both the price source and the provider reach it: boto3 clients (``clients``), the error
tables and botocore's exception classes (``errors``), and the answers both read (``shapes``)."""
