"""The serving-runner simulation: replayable scenarios (``scenario``), the scheduler and
target verification around the proposer (``simulator``), and whole runs checked against
the oracle (``run``)."""
