"""The module ``dramatiq bench.peers.dramatiq_worker`` loads: the broker and actor, configured by the bench's environment."""

import os

import dramatiq

from bench.peers.dramatiq_app import declare_actor, new_broker

broker = new_broker(os.environ["PEERS_BENCH_ENDPOINT"], os.environ["PEERS_BENCH_QUEUE"])
dramatiq.set_broker(broker)
noop = declare_actor(broker)
