"""The Airflow adapter, and the only package that imports Airflow: the DAG factory
(`dags`), the task bodies (`tasks`), the Spark operator (`operators`), clients made from
Airflow connections (`connections`) and alert sending (`alerting`). Everything here is
thin: each task builds its clients and calls one library function.
"""
