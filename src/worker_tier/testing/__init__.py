"""Testing your tasks: the real worker, delays and periodic ticks in-process, on in-memory SQS, DynamoDB and S3.

``TaskWorld`` (and the pytest fixture ``worker_tier_world``, from the ``worker_tier`` pytest plugin) runs sent
messages through ``worker_tier.worker.Worker``, the code the Lambda handler runs, on a clock the test moves
(``advance``); ``lambda_record`` builds the Lambda SQS event record of a received message. See docs/testing.md.
"""

from worker_tier.core.envelope import lambda_record
from worker_tier.testing.world import DeadLetter, RunResult, TaskWorld
from worker_tier.worker.fates import Outcome

__all__ = ["DeadLetter", "Outcome", "RunResult", "TaskWorld", "lambda_record"]
