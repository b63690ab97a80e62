"""Monitor: what operators watch. `freshness` (the archive's lag against its SLA after
each commit), `status` (per partition token, end offset, lag in messages and time),
`alerts` (the alert mails as pure functions of their facts) and `preflight` (can this
deployment reach Kafka and write its archive root). Pure where it can be: the airflow
package gathers the facts and sends the mail.
"""
