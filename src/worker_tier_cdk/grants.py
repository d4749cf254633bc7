"""Grants limited to what a role uses: DynamoDB items by key prefix, and the one signing secret of HTTP forwarding.

Every role that touches a shared table gets only the actions it calls, and only on
items whose partition key starts with its own prefix, through IAM's
``dynamodb:LeadingKeys`` condition:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html

The state table's key prefixes, one per owner:

- ``idempotency#``: Powertools idempotency records (the worker and the container worker);
- ``scheduler#``: the delay dispatcher's lease and watermark (the prefix keeps its first name);
- ``cron#``: cron tick claims;
- ``flow#``: flow control's rates, concurrency slots and message waits (the worker and the container worker);
- ``job#``: tracked jobs (docs/jobs.md): a producer writes the first records and reads them; the workers update them,
  and write first records too for the tracked sends of their tasks.

The delay table's producers write ``b#`` (delayed messages) and ``dedupe#`` (dedupe-key markers); to cancel
and reschedule, they read and delete only the cancellable shard's messages (``CANCELLABLE_MESSAGE_KEY_PATTERN``)
and the markers.

``grant_signing_secret``: the one read HTTP forwarding's signing key needs, on that one secret or parameter.

``grant_payload_put`` and ``grant_payload_consume``: the payload bucket's objects (docs/large-payloads.md). A producer
puts only under ``payloads/``; a worker reads and deletes any object of the bucket (AWS's Extended Client writes its
keys at the bucket's root), lists the bucket (so a missing key answers NoSuchKey, not AccessDenied) and puts under
``payloads/`` for its tasks' own sends.
"""

from __future__ import annotations

import re
from typing import Sequence

from aws_cdk import Acknowledgment, Stack, Validations, aws_dynamodb as dynamodb, aws_iam as iam, aws_s3 as s3
from constructs import Construct

from worker_tier.delays import delay

# The key prefixes are the contract's (worker_tier.core.contract); tests/infra/test_stack.py checks the runtime's keys start so.
from worker_tier.core.contract import (
    DELAY_BUCKET_KEY_PREFIX,
    DELAY_DEDUPE_KEY_PREFIX,
    DISPATCHER_KEY_PREFIX,
    JOB_RESULT_KEY_PREFIX,
    PAYLOAD_KEY_PREFIX,
)
from worker_tier.core.errors import ConfigurationError

# The contract's prefixes under the names this module exports.
DELAYED_MESSAGE_KEY_PREFIX = DELAY_BUCKET_KEY_PREFIX
DEDUPE_KEY_PREFIX = DELAY_DEDUPE_KEY_PREFIX
# The partition keys of the cancellable shard of every minute (``delay.bucket_key(minute, CANCELLABLE_SHARD)``:
# ``b#<minute>#15``); IAM's StringLike ``*`` stands for the minute. tests/infra/test_stack.py checks it matches
# that shard's keys and no other shard's.
CANCELLABLE_MESSAGE_KEY_PATTERN = delay.bucket_key(0, delay.CANCELLABLE_SHARD).replace("#0#", "#*#", 1)

# What Powertools' DynamoDBPersistenceLayer calls: get_item, put_item, update_item, delete_item.
IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Flow control (worker_tier.flow.limiter): rate and slot updates, wait counts added and read. No Put or Delete.
FLOW_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem")
# Tracked jobs (worker_tier.producer.jobs): the first records (BatchWriteItem, a keyed job's conditional PutItem; an
# unsent message's record deleted by BatchWriteItem), status and wait (GetItem), a cancelled job marked (UpdateItem).
JOB_PRODUCE_ACTIONS = ("dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
# The workers write each change (UpdateItem, worker_tier.worker.tracking) and, for their tasks' tracked sends, what a
# producer writes: the same actions.
JOB_WORKER_ACTIONS = JOB_PRODUCE_ACTIONS
# A producer reads a job's result kept in the payload bucket (results/<job id>.json); the workers put it there with
# their PutObject on the whole bucket (PAYLOAD_READ_DELETE_ACTIONS).
JOB_RESULT_READ_ACTIONS = ("s3:GetObject",)
# The delay dispatcher's lease, watermark and minute records (worker_tier/delays/dispatcher.py).
DISPATCHER_STATE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Tick claims of periodic tasks: claim, mark sent, give back (worker_tier/periodic/ticks.py).
TICK_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Producers store delayed messages by BatchWriteItem, or by a TransactWriteItems of two Puts (marker and
# message), which IAM authorises as PutItem on each item.
DELAYED_MESSAGE_ACTIONS = ("dynamodb:BatchWriteItem", "dynamodb:PutItem")
# Moving a message item the dispatcher would not read in time to where it reads it (worker_tier.delays.delivery.refile).
REFILE_ACTIONS = ("dynamodb:PutItem", "dynamodb:DeleteItem")
# Dedupe-key markers of immediate sends: claim (a conditional Put, which returns the holder when refused),
# settle (Put) or give back (Delete).
DEDUPE_MARKER_ACTIONS = ("dynamodb:PutItem", "dynamodb:DeleteItem")

# Cancellable messages (worker_tier.delays.cancellation): a cancel or reschedule reads the marker and the item (GetItem),
# deletes the item (DeleteItem; the marker is Put, cancelled or moved), and checks in the same transaction that the delay dispatcher has not started the
# minute: a ConditionCheckItem on its minute records in the state table, which writes nothing.
CANCEL_ACTIONS = ("dynamodb:GetItem", "dynamodb:DeleteItem")
DISPATCH_STARTED_CHECK_ACTIONS = ("dynamodb:ConditionCheckItem",)

LEADING_KEYS_CONDITION = "ForAllValues:StringLike"

# The payload bucket's calls (worker_tier.core.payloads.PayloadStore): put_object; get_object and delete_object; a
# ListBucket grant makes S3 answer a missing key with 404 NoSuchKey rather than 403 AccessDenied:
# https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html#API_GetObject_RequestSyntax ("Permissions").
# A producer deletes what it uploaded for a send that did not happen (an orphan) or a delayed message it cancelled.
# DeleteObject adds no power PutObject on the same keys lacks: a put may already overwrite any object there.
PAYLOAD_PUT_ACTIONS = ("s3:PutObject", "s3:DeleteObject")
# A worker reads and deletes any object; it puts too: its tasks' own large sends, and the copy of an object onto itself
# that restarts its lifecycle clock when its message begins a new life (worker_tier.core.payloads.PayloadStore.refresh).
PAYLOAD_READ_DELETE_ACTIONS = ("s3:GetObject", "s3:DeleteObject", "s3:PutObject")
PAYLOAD_LIST_ACTIONS = ("s3:ListBucket",)
# Under SSE-KMS, S3 calls KMS as the caller: an upload needs GenerateDataKey, a download Decrypt (a multipart upload,
# which PayloadStore does not make, would need Decrypt too):
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html#require-sse-kms
PAYLOAD_KEY_PUT_ACTIONS = ("kms:GenerateDataKey",)
PAYLOAD_KEY_READ_ACTIONS = ("kms:Decrypt",)

# Reading the signing key by its ARN (the forwarding runtime's one call for each kind).
SECRET_READ_ACTION = "secretsmanager:GetSecretValue"
PARAMETER_READ_ACTION = "ssm:GetParameter"
# A Secrets Manager ARN ends in "-" and six random characters; an ARN without them is partial, and a policy
# names the secret as the partial ARN followed by "-??????":
# https://docs.aws.amazon.com/secretsmanager/latest/userguide/auth-and-access_examples.html#auth-and-access_examples_wildcard
# (AWS advises against names that themselves end in "-" and six characters, which read as complete:
# https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen).
# An ARN is taken as complete only when its last six characters mix upper case, lower case and digits, as
# most random suffixes do and few names (like "worker-signer") do; any other ARN ending in "-" and six letters
# or digits may be either, and is granted both ways: as written, and followed by "-??????".
SECRET_ARN_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")
CLEARLY_COMPLETE_SECRET_ARN = re.compile(r"-(?=[^-]*[a-z])(?=[^-]*[A-Z])(?=[^-]*[0-9])[A-Za-z0-9]{6}$")
PARTIAL_SECRET_ARN_WILDCARD = "-??????"


class GrantError(ConfigurationError):
    """A grant asked for something that would not limit the grantee."""


def grant_items(
    table: dynamodb.ITableV2,
    grantee: iam.IGrantable,
    *,
    actions: Sequence[str],
    leading_key_prefixes: Sequence[str],
) -> iam.Grant:
    """Allow ``actions`` on ``table``, only on items whose partition key starts with one of the prefixes.

    Examples
    --------
    >>> grant_items(state_table, worker.function, actions=IDEMPOTENCY_ACTIONS,  # doctest: +SKIP
    ...             leading_key_prefixes=[IDEMPOTENCY_KEY_PREFIX])
    """
    _check(actions, leading_key_prefixes)
    return iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(actions),
        resource_arns=[table.table_arn],
        conditions={LEADING_KEYS_CONDITION: {"dynamodb:LeadingKeys": [f"{prefix}*" for prefix in leading_key_prefixes]}},
    )


def grant_delay_produce(
    table: dynamodb.ITableV2, grantee: iam.IGrantable, state_table: dynamodb.ITableV2 | None = None
) -> None:
    """Let a producer write delayed messages (``b#``) and dedupe-key markers (``dedupe#``) to the delay table, nothing else.

    With ``state_table``, also cancel and reschedule them: read and delete the cancellable shard's messages and
    the markers (no other shard's messages), and check the delay dispatcher's minute records (``scheduler#``)
    without writing them.
    """
    grant_items(table, grantee, actions=DELAYED_MESSAGE_ACTIONS, leading_key_prefixes=[DELAYED_MESSAGE_KEY_PREFIX])
    grant_items(table, grantee, actions=DEDUPE_MARKER_ACTIONS, leading_key_prefixes=[DEDUPE_KEY_PREFIX])
    if state_table is not None:
        grant_keys(table, grantee, CANCEL_ACTIONS, [CANCELLABLE_MESSAGE_KEY_PATTERN, f"{DEDUPE_KEY_PREFIX}*"])
        grant_items(state_table, grantee, actions=DISPATCH_STARTED_CHECK_ACTIONS, leading_key_prefixes=[DISPATCHER_KEY_PREFIX])


def grant_keys(table: dynamodb.ITableV2, grantee: iam.IGrantable, actions: Sequence[str], patterns: list[str]) -> iam.Grant:
    """Allow ``actions`` on ``table``, only on items whose partition key matches one of ``patterns`` (StringLike).

    Examples
    --------
    >>> grant_keys(delay_table, recovery_function, ["dynamodb:GetItem"], [CANCELLABLE_MESSAGE_KEY_PATTERN])  # doctest: +SKIP
    """
    _check(actions, [pattern.split("*", 1)[0] for pattern in patterns])
    return iam.Grant.add_to_principal(grantee=grantee, actions=list(actions), resource_arns=[table.table_arn],
                                      conditions={LEADING_KEYS_CONDITION: {"dynamodb:LeadingKeys": patterns}})


def grant_signing_secret(grantee: iam.IGrantable, arn: str) -> iam.Grant:
    """Allow reading the one secret or parameter ``arn`` names: GetSecretValue, or GetParameter, nothing else.

    A secret ARN whose end may be a random suffix or part of the name (``...:secret:worker-signer``) is
    granted both ways; a complete ARN is the sure way to an exact grant (``CLEARLY_COMPLETE_SECRET_ARN``).
    A SecureString under the account's ``aws/ssm`` key needs no KMS grant (that key's policy lets SSM
    decrypt for the account's principals); one under a customer managed key needs ``kms:Decrypt`` on
    that key, which its key policy or the caller grants.

    Examples
    --------
    >>> grant_signing_secret(task_role, "arn:aws:ssm:eu-west-1:123456789012:parameter/app/signing")  # doctest: +SKIP
    """
    service = arn.split(":")[2]
    if service == "secretsmanager":
        return iam.Grant.add_to_principal(grantee=grantee, actions=[SECRET_READ_ACTION], resource_arns=_secret_resources(arn))
    if service == "ssm":
        return iam.Grant.add_to_principal(grantee=grantee, actions=[PARAMETER_READ_ACTION], resource_arns=[arn])
    raise GrantError(f"a signing secret must be a Secrets Manager secret ARN or an SSM parameter ARN, got {arn!r}")


def grant_payload_put(bucket: s3.IBucket, grantee: iam.IGrantable) -> iam.Grant:
    """Allow putting and deleting objects under ``payloads/`` of the payload bucket (and, under SSE-KMS, the data
    keys for them).

    What a producer (``Client.send``) and the periodic-task function need to offload a body, and to delete it at once
    when its send did not happen (an orphan) or its delayed message was cancelled; nothing is read back. DeleteObject
    there gives no power PutObject on the same keys lacks (a put may overwrite any of them).

    Examples
    --------
    >>> grant_payload_put(worker_queue.payload_bucket, web_app_role)  # doctest: +SKIP
    """
    return _grant_prefix(bucket, grantee, PAYLOAD_KEY_PREFIX, PAYLOAD_PUT_ACTIONS, PAYLOAD_KEY_PUT_ACTIONS,
                         "A producer offloads each large body under a fresh key (payloads/<uuid>) and deletes it when "
                         "its send did not happen: the grant is PutObject and DeleteObject under the payloads/ prefix "
                         "of the one payload bucket, nothing else.")


def grant_payload_consume(bucket: s3.IBucket, grantee: iam.IGrantable) -> None:
    """Allow a worker to read, put and delete any object of the payload bucket, and list it.

    Any object, not only ``payloads/``: AWS's Extended Client (Java and Python) writes its keys at the bucket's root,
    and a worker copies an object onto itself (GetObject and PutObject) to restart its lifecycle clock when its
    message's copy begins a new life (the DLQ, a retry through the delay table). Under SSE-KMS, it may decrypt what it
    reads and make data keys for what it puts.

    Examples
    --------
    >>> grant_payload_consume(worker_queue.payload_bucket, worker.function)  # doctest: +SKIP
    """
    iam.Grant.add_to_principal(grantee=grantee, actions=list(PAYLOAD_READ_DELETE_ACTIONS),
                               resource_arns=[bucket.arn_for_objects("*")])
    iam.Grant.add_to_principal(grantee=grantee, actions=list(PAYLOAD_LIST_ACTIONS), resource_arns=[bucket.bucket_arn])
    if bucket.encryption_key is not None:
        bucket.encryption_key.grant(grantee, *PAYLOAD_KEY_READ_ACTIONS, *PAYLOAD_KEY_PUT_ACTIONS)
    _acknowledge_objects(grantee, bucket, "*",
                         "A worker reads, keeps (a copy onto itself) and deletes the body of each offloaded message it "
                         "receives, whose key the producer chose (AWS's Extended Client writes keys at the bucket's "
                         "root), and puts its tasks' own large bodies: the grant is GetObject, PutObject and "
                         "DeleteObject on the objects of the one payload bucket, nothing else.")


def grant_job_results_read(bucket: s3.IBucket, grantee: iam.IGrantable) -> iam.Grant:
    """Allow reading tracked jobs' results kept in the payload bucket (``results/``), and their key's Decrypt."""
    return _grant_prefix(bucket, grantee, JOB_RESULT_KEY_PREFIX, JOB_RESULT_READ_ACTIONS, PAYLOAD_KEY_READ_ACTIONS,
                         "A producer reads a tracked job's result kept under results/<job id>.json (docs/jobs.md): "
                         "GetObject under the results/ prefix only.")


def _grant_prefix(bucket: s3.IBucket, grantee: iam.IGrantable, prefix: str, actions: Sequence[str],
                  key_actions: Sequence[str], reason: str) -> iam.Grant:
    """Allow ``actions`` on the objects under ``prefix`` of ``bucket`` (under SSE-KMS, ``key_actions`` on its key),
    the wildcard acknowledged to cdk-nag with ``reason``."""
    grant = iam.Grant.add_to_principal(grantee=grantee, actions=list(actions),
                                       resource_arns=[bucket.arn_for_objects(f"{prefix}*")])
    if bucket.encryption_key is not None:
        bucket.encryption_key.grant(grantee, *key_actions)
    _acknowledge_objects(grantee, bucket, f"{prefix}*", reason)
    return grant


def _acknowledge_objects(grantee: iam.IGrantable, bucket: s3.IBucket, pattern: str, reason: str) -> None:
    """cdk-nag's AwsSolutions-IAM5 acknowledged for this one object pattern of this one bucket, on the grantee's role."""
    principal = grantee.grant_principal
    if not Construct.is_construct(principal):  # a principal outside the app (an account, a service) has no policy here
        return
    stack = Stack.of(principal)  # type: ignore[arg-type]  # checked to be a construct
    Validations.of(principal).acknowledge(  # type: ignore[arg-type]  # checked to be a construct
        Acknowledgment(id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{_nag_arn(stack, bucket)}/{pattern}]", reason=reason)
    )


def _nag_arn(stack: Stack, bucket: s3.IBucket) -> str:
    """The bucket's ARN as cdk-nag writes it in a finding: ``<LogicalId.Arn>``, or the ARN with ``<AWS::Partition>``."""
    resolved = stack.resolve(bucket.bucket_arn)
    if isinstance(resolved, dict) and "Fn::GetAtt" in resolved:
        logical_id, attribute = resolved["Fn::GetAtt"]
        return f"<{logical_id}.{attribute}>"
    if isinstance(resolved, dict) and "Fn::Join" in resolved:
        separator, parts = resolved["Fn::Join"]
        return separator.join(part if isinstance(part, str) else f"<{part['Ref']}>" for part in parts)
    return str(resolved)


def _secret_resources(arn: str) -> list[str]:
    """The resources naming the secret of a complete or partial ARN (CLEARLY_COMPLETE_SECRET_ARN decides)."""
    if CLEARLY_COMPLETE_SECRET_ARN.search(arn):
        return [arn]
    if SECRET_ARN_SUFFIX.search(arn):
        return [arn, arn + PARTIAL_SECRET_ARN_WILDCARD]
    return [arn + PARTIAL_SECRET_ARN_WILDCARD]


def _check(actions: Sequence[str], prefixes: Sequence[str]) -> None:
    """Refuse grants that would reach every item or every action."""
    if not prefixes or any(not prefix or "*" in prefix or "?" in prefix for prefix in prefixes):
        raise GrantError(f"leading_key_prefixes must be non-empty prefixes without wildcards, got {list(prefixes)!r}")
    if not actions or any(not action.startswith("dynamodb:") or "*" in action for action in actions):
        raise GrantError(f"actions must be named dynamodb: actions without wildcards, got {list(actions)!r}")
