"""AWS service quotas that Worker Tier's code depends on, each with its source.

Every limit lives here once; code, tests and docs import it from here.
"""

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
SQS_MAX_BATCH_ENTRIES = 10

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
SQS_MAX_MESSAGE_ATTRIBUTES = 10

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
# Applies to one message (body plus attributes) and to the sum of a SendMessageBatch call.
SQS_MAX_MESSAGE_BYTES = 1024 * 1024
# The largest body AWS's Extended Client libraries offload to S3 (their documented maximum, 2 GB):
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-s3-messages.html
EXTENDED_CLIENT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024 * 1024

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-delay-queues.html
SQS_MAX_DELAY_SECONDS = 15 * 60

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html
SQS_MAX_VISIBILITY_TIMEOUT_SECONDS = 12 * 60 * 60

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
SQS_MIN_RETENTION_SECONDS = 60
SQS_MAX_RETENTION_SECONDS = 14 * 24 * 60 * 60

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageAttributeValue.html
SQS_MAX_ATTRIBUTE_NAME_CHARS = 256

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html (MaximumMessageSize)
SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES = 1024
# SQS's default MaximumMessageSize until August 2025, and the smallest configuration in common use:
# https://aws.amazon.com/about-aws/whats-new/2025/08/amazon-sqs-max-payload-size-1mib/
SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES = 256 * 1024

# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html
DYNAMODB_MAX_BATCH_WRITE_ITEMS = 25

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-items
DYNAMODB_MAX_ITEM_BYTES = 400 * 1024

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
DYNAMODB_MAX_PARTITION_KEY_BYTES = 2048

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html (records are kept 24 hours)
DYNAMODB_STREAM_RETENTION_SECONDS = 24 * 60 * 60

# https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html (MaximumBatchingWindowInSeconds 0..300)
LAMBDA_STREAM_MAX_BATCHING_WINDOW_SECONDS = 300

# https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html
LAMBDA_MAX_TIMEOUT_SECONDS = 15 * 60

# https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html
LAMBDA_ASYNC_MAX_RETRY_ATTEMPTS = 2
LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS = 6 * 60 * 60

# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html (stopTimeout, Fargate)
ECS_FARGATE_MAX_STOP_TIMEOUT_SECONDS = 120

# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-tasks-services.html#fargate-tasks-size
# Fargate's task sizes: the memory (MB) each cpu (units) allows; CloudFormation refuses any other pair.
FARGATE_MEMORY_MB_BY_CPU: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4096 + 1, 1024)),
    1024: tuple(range(2048, 8192 + 1, 1024)),
    2048: tuple(range(4096, 16384 + 1, 1024)),
    4096: tuple(range(8192, 30720 + 1, 1024)),
    8192: tuple(range(16384, 61440 + 1, 4096)),
    16384: tuple(range(32768, 122880 + 1, 8192)),
}

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html (WaitTimeSeconds)
SQS_MAX_WAIT_TIME_SECONDS = 20

# https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10240

# https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html#events-sqs-max-concurrency
LAMBDA_SQS_MIN_MAXIMUM_CONCURRENCY = 2
LAMBDA_SQS_MAX_MAXIMUM_CONCURRENCY = 1000

# https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html (batch size and window)
LAMBDA_SQS_MAX_BATCH_SIZE_STANDARD = 10000
LAMBDA_SQS_MAX_BATCH_SIZE_FIFO = 10
LAMBDA_SQS_MAX_BATCH_SIZE_WITHOUT_WINDOW = 10
LAMBDA_SQS_MAX_BATCHING_WINDOW_SECONDS = 300

def attribute_room(taken: int, reserved: int = 0) -> int:
    """How many more attributes a message holding ``taken`` can carry, keeping ``reserved`` for Worker Tier's own.

    Negative when it already holds too many. SQS allows ``SQS_MAX_MESSAGE_ATTRIBUTES`` per message;
    system attributes (``MessageSystemAttributes``) are not counted.

    Examples
    --------
    >>> attribute_room(3), attribute_room(9, reserved=1), attribute_room(0, reserved=2)
    (7, 0, 8)
    """
    return SQS_MAX_MESSAGE_ATTRIBUTES - reserved - taken
