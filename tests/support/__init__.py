"""What the tests, the benchmarks and the two commands share, imported as `tests.support`
(pytest puts the repo root on sys.path; run a module with `python -m` from the root):

- localservices: install-free start, health check and stop of the local services
  (Kafka, MinIO, SMTP, Toxiproxy, Airflow, a standalone Spark cluster); also a command;
- smtp_capture: the SMTP server that keeps each mail as a file;
- pipeline: drives the real backup DAG, or its three steps one at a time, on a config of its
  own; `airflow` runs this venv's Airflow CLI;
- mail: reads what smtp_capture received; an alerting Pipeline;
- browser: headless Chromium through Selenium, and Airflow's login;
- fault_proxies: Toxiproxy's API and an HTTP proxy that answers chosen statuses;
- archive_golden: deterministic records and the archive's files for them (golden checksums);
- counting_storage: a local Storage that counts the objects it reads;
- bench: the benchmarks and their shared parts.
"""
