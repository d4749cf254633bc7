"""App targets: an EB worker app run in-process (``app_adapter``) or over HTTP (``forwarding``), chosen from the settings (``app_target``), its answers judged by sqsd's rules (``sqsd``)."""
