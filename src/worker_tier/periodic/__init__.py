"""Periodic tasks: ``cron.yaml``'s reader (``cron_config``), its cron expressions (``cron_expression``, ``cron_preview``) and each tick's claim and send, once (``ticks``)."""
