"""Local fakes of the clouds' APIs (real SDKs pointed at 127.0.0.1), for tests and benches."""
