"""The app ``celery -A bench.peers.celery_worker worker`` runs: configured by the bench's environment."""

import os

from bench.peers.celery_app import new_app

app = new_app(os.environ["PEERS_BENCH_ENDPOINT"], os.environ["PEERS_BENCH_QUEUE"])
