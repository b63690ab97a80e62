"""Monitor: what operators watch.

- `status`: per partition the token, Kafka's end offset, the lag in messages and time,
  what the catalog holds and its holes (`kafka-archive status`).
- `freshness`: per topic the archive's lag against its SLA, after each commit.
- `overview` and `page`: the group page in the Airflow UI (the facts, then the HTML).
- `alerts`: the alert mails as pure functions of their facts.
- `preflight`: can this deployment reach Kafka, write its archive root and mail.

Pure where it can be: the airflow package gathers the facts and sends the mail.
"""
