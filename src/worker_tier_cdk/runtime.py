"""The Lambda runtime and the public Powertools layer, kept in one place so they agree."""

from __future__ import annotations

from aws_cdk import Aws, aws_lambda

# The one Python a deployment runs; pyproject's requires-python says which the runtime supports.
# The Lambda runtime, the Powertools layer's build and the container image's default base
# (worker_tier.core.settings.DEFAULT_CONTAINER_BASE_IMAGE, the Dockerfile's ARG) all name it;
# tests/infra/test_stack.py holds them, and the Python running the tests, to it.
PYTHON_VERSION = "3.14"
LAMBDA_RUNTIME = aws_lambda.Runtime.PYTHON_3_14
LAMBDA_ARCHITECTURE = aws_lambda.Architecture.ARM_64

# https://docs.powertools.aws.dev/lambda/python/latest/#lambda-layer
# Layer version 27 is Powertools 3.23.0, the version requirements.txt pins for the tests.
POWERTOOLS_VERSION = "3.23.0"
POWERTOOLS_LAYER_VERSION = 27
POWERTOOLS_LAYER_ACCOUNT = "017000801446"


def powertools_layer_arn(region: str = Aws.REGION) -> str:
    """The public Powertools v3 layer for LAMBDA_RUNTIME and LAMBDA_ARCHITECTURE."""
    python = "python" + PYTHON_VERSION.replace(".", "")
    arch = LAMBDA_ARCHITECTURE.name  # "arm64" or "x86_64", as the layer names spell it
    return (
        f"arn:aws:lambda:{region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"AWSLambdaPowertoolsPythonV3-{python}-{arch}:{POWERTOOLS_LAYER_VERSION}"
    )
