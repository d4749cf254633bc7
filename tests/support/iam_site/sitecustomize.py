"""IAM enforcement inside a subprocess the tests start (``python -m worker_tier worker``), when they name a world.

On PYTHONPATH (``tests.support.stacks.subprocess_pythonpath``), Python imports this at start-up. With
``WORKER_TIER_TEST_IAM_WORLD`` set, every call the process's roles make is checked as in the test process, and each
denial is appended, one line, to the file ``WORKER_TIER_TEST_IAM_DENIALS`` names, which the test reads.
"""

import os
import sys

if os.environ.get("WORKER_TIER_TEST_IAM_WORLD"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    from tests.support import iam

    iam.install_from_environment()
