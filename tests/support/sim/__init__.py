"""A deterministic simulation of the archive's protocol (issue 41): random sequences of
Airflow runs and re-executed tasks, kills at any write, operators' actions and Kafka's
own changes, run on the real library in process against a simulated Kafka, with the
invariants checked after every step; a failing sequence is shrunk to a minimal one and
printed as steps a person can read and replay by seed.

    kafka.py    the simulated Kafka
    world.py    the deployment under test: steps, task bodies, invariants, liveness
    replay.py   a replay of an archived topic into a simulated target that refuses
    explore.py  sequences from a seed, shrinking, the command line

    .venv/bin/python -m tests.support.sim --sequences 200      # seeds 0..199
    .venv/bin/python -m tests.support.sim --seed 17            # one, printed step by step
    .venv/bin/python -m tests.support.sim --soak 60            # new seeds for 60 minutes
    .venv/bin/python -m tests.support.sim --replay --sequences 300  # replay sequences
"""
