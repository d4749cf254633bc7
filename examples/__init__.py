"""Elastic Beanstalk worker apps, written as EB teams write them, that Worker Tier runs unchanged.

Each answers sqsd's POSTs: ordinary messages at ``/`` with a JSON body ``{"task": ..., "arguments": ...}``,
and the ticks of ``examples/cron.yaml`` at their urls. Run one with the local environment:
``make run ARGS="--app examples.flask_app:app"`` (docs/migrating-from-eb.md).
"""
