"""IAM enforced on moto: each AWS call a Worker Tier role makes is authorized against the policy the stack synthesizes.

moto never checks IAM, so a missing grant passes every moto test and fails on AWS. This module closes the gap:

- ``Policy.decide``: a small Allow/Deny model of IAM's documented policy evaluation
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html): an explicit Deny
  (identity or resource policy) wins, else an Allow must match, else the implicit deny. Actions match
  case-insensitively with ``*``/``?``; resources are ARN globs (``*``, ``?``, case-sensitive); conditions follow
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html and the
  set operators of https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html
  (``ForAllValues`` is true when the key is absent). An operator it does not know fails loudly instead of allowing.
- ``authorization``: the IAM action(s), resource ARN(s) and condition keys of one botocore call, from the Service
  Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/reference/): SendMessageBatch
  is ``sqs:SendMessage``, a TransactWriteItems is each item's own action, ``dynamodb:LeadingKeys`` is the set of
  partition keys a request touches, ``dynamodb:ListStreams`` takes only ``*``; an S3 object call is its action on
  ``arn:aws:s3:::<bucket>/<key>`` (HeadObject is ``s3:GetObject``, DeleteObjects each key's ``s3:DeleteObject``),
  a bucket call (ListObjectsV2, HeadBucket) ``s3:ListBucket`` on ``arn:aws:s3:::<bucket>``. Operations it does not list are
  checked as ``<service>:<Operation>`` on ``*``, so a call added later is checked too (denied unless granted).
- ``roles_of``: each role's statements from a synthesized template, with CloudFormation tokens (GetAtt, Ref,
  Join, Sub, pseudo parameters) resolved into the ARNs of the moto resources a test made; SQS queue policies and S3
  bucket policies apply as resource policies (their Deny statements: the Allow of a role in the account is its own).
- ``Enforcement``: a botocore ``before-parameter-build`` handler (added to botocore's built-in handlers, as moto
  adds its own, so every client made afterwards carries it). The acting role is found from the call stack: the
  outermost frame of a runtime entry point (``ROLE_OF_MODULE``) names it (``Enforcement.acting_as`` names it for
  runtime code with no entry point of its own; a thread whose stack names none, like the heartbeat's, acts as the
  role of the code that started it, recorded by ``Thread.start`` once ``install`` ran); calls from tests, the local environment and the CLI are setup or
  operator calls and are not checked. A stack rather than a context variable: the container worker's threads do not
  inherit context variables, and every existing test is then checked without naming a role. A denied call raises AccessDeniedException as AWS
  would, and is recorded, so that a test fails even where the runtime handles the error (``Enforcement.check``).

Why not an existing evaluator: policy_sentry and parliament (PyPI) write and lint policies, they do not evaluate a
request; cloudsplaining reports risky grants. None decides whether one request is allowed, with conditions. This
model is checked against the documented examples in tests/unit/test_iam_policy.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
PARTITION = "aws"

# ---------------------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Request:
    """One IAM authorization: an action on a resource, with its request context keys."""

    action: str
    resource: str
    context: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        keys = ", ".join(f"{key}={value}" for key, value in sorted(self.context.items()) if key != "aws:SecureTransport")
        return f"{self.action} on {self.resource}" + (f" ({keys})" if keys else "")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


@dataclass(frozen=True)
class Policy:
    """A role's identity statements and the resource policies' statements that apply to it."""

    name: str
    statements: tuple[dict[str, Any], ...]
    resource_statements: tuple[dict[str, Any], ...] = ()

    def decide(self, request: Request) -> Decision:
        """IAM's evaluation for one principal of the account: explicit Deny, then Allow, else implicit deny."""
        for statement in (*self.statements, *self.resource_statements):
            if statement.get("Effect") == "Deny" and applies(statement, request):
                return Decision(False, f"explicitly denied by {json.dumps(statement, sort_keys=True)}")
        for statement in self.statements:
            if statement.get("Effect") == "Allow" and applies(statement, request):
                return Decision(True, "allowed")
        where = f" where {_context_text(request)}" if _context_text(request) else ""
        return Decision(False, f"missing statement: Allow {request.action} on {request.resource}{where}")


def _context_text(request: Request) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(request.context.items()) if key != "aws:SecureTransport")


def applies(statement: Mapping[str, Any], request: Request) -> bool:
    """Whether the statement's action, resource and condition blocks all match the request."""
    if "Action" in statement:
        if not any(_glob(pattern, request.action, case=False) for pattern in _listed(statement["Action"])):
            return False
    elif any(_glob(pattern, request.action, case=False) for pattern in _listed(statement.get("NotAction", []))):
        return False
    if "Resource" in statement:
        if not any(_glob(pattern, request.resource) for pattern in _listed(statement["Resource"])):
            return False
    elif "NotResource" in statement and any(_glob(p, request.resource) for p in _listed(statement["NotResource"])):
        return False
    return all(condition_holds(operator, block, request.context)
               for operator, block in statement.get("Condition", {}).items())


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, case: bool = True) -> bool:
    """IAM's wildcard match: ``*`` any run of characters, ``?`` one character, everything else literal."""
    if not isinstance(pattern, str):
        raise PolicyModelError(f"a policy value must be a string once resolved, got {pattern!r}")
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


class PolicyModelError(Exception):
    """The policy uses something this model does not evaluate: extend the model rather than guess."""


_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda policy, value: policy == value,
    "StringNotEquals": lambda policy, value: policy != value,
    "StringEqualsIgnoreCase": lambda policy, value: policy.lower() == value.lower(),
    "StringLike": _glob,
    "StringNotLike": lambda policy, value: not _glob(policy, value),
    "ArnEquals": lambda policy, value: policy == value,
    "ArnLike": _glob,
    "Bool": lambda policy, value: policy.lower() == value.lower(),
}
_NEGATED = {"StringNotEquals", "StringNotLike"}


def condition_holds(operator: str, block: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """One condition operator's block: every key must hold (AND); a key's values are alternatives (OR)."""
    qualifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    if name not in _STRING_TESTS or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise PolicyModelError(f"condition operator {operator!r} is not modelled in tests/support/iam.py: add it")
    test = _STRING_TESTS[name]
    for key, allowed in block.items():
        allowed_values = [str(v).lower() if isinstance(v, bool) else str(v) for v in _listed(allowed)]
        present = key in context
        values = [str(v).lower() if isinstance(v, bool) else str(v) for v in _listed(context.get(key, []))]

        def matches(value: str, allowed_values: list[str] = allowed_values) -> bool:
            hits = [test(policy, value) for policy in allowed_values]
            return all(hits) if name in _NEGATED else any(hits)

        if qualifier == "ForAllValues":
            holds = all(matches(value) for value in values)  # true when the key is absent or empty
        elif qualifier == "ForAnyValue":
            holds = any(matches(value) for value in values)
        elif not present:
            holds = if_exists or name in _NEGATED
        else:
            holds = all(matches(value) for value in values) if values else False
        if not holds:
            return False
    return True


# ------------------------------------------------------------------------------------------- template to policies

PSEUDO = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": PARTITION, "AWS::URLSuffix": "amazonaws.com",
          "AWS::NoValue": None}


@dataclass
class Resources:
    """The moto resources a test made, by the logical id (without CDK's 8-character hash) of the template's."""

    queues: dict[str, str | tuple[str, ...]] = field(default_factory=dict)  # logical id stem -> queue name(s)
    tables: dict[str, str] = field(default_factory=dict)  # logical id stem -> table name
    functions: dict[str, str] = field(default_factory=dict)  # logical id stem -> function name
    buckets: dict[str, str] = field(default_factory=dict)  # logical id stem -> bucket name

    def attributes(self, logical_id: str, template: Mapping[str, Any]) -> dict[str, str]:
        """What Ref and GetAtt of the logical id give, or names that match no ARN when the test made no such resource."""
        stem = stem_of(logical_id)
        kind = template["Resources"].get(logical_id, {}).get("Type", "")
        unresolved = f"unresolved:{logical_id}"
        if kind == "AWS::SQS::Queue":
            found = self.queues.get(stem, unresolved)
            names = (found,) if isinstance(found, str) else found
            arns = [f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{name}" for name in names]
            # One queue of the template may stand for several of the test's: its ARN is then a list (Resource only).
            return {"Ref": queue_url(names[0]), "Arn": arns[0] if len(arns) == 1 else arns, "QueueName": names[0],
                    "QueueUrl": queue_url(names[0])}
        if kind in ("AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table"):
            name = self.tables.get(stem, unresolved)
            arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
            return {"Ref": name, "Arn": arn, "StreamArn": f"{arn}/stream/*"}
        if kind == "AWS::S3::Bucket":
            name = self.buckets.get(stem, unresolved)
            return {"Ref": name, "Arn": f"arn:{PARTITION}:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com"}
        if kind == "AWS::Lambda::Function":
            name = self.functions.get(stem, unresolved)
            return {"Ref": name, "Arn": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{name}"}
        return {"Ref": unresolved, "Arn": unresolved}


def stem_of(logical_id: str) -> str:
    """A CDK logical id without its hash: ``WorkerQueue9380F652`` -> ``WorkerQueue``."""
    return re.sub(r"[0-9A-F]{8}$", "", logical_id)


def queue_url(name: str) -> str:
    return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"


def resolve(value: Any, template: Mapping[str, Any], resources: Resources) -> Any:
    """A template value with its intrinsic functions evaluated against the test's resources."""
    if isinstance(value, list):
        return [resolve(item, template, resources) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1 or not next(iter(value)).startswith(("Fn::", "Ref")):
        return {key: resolve(item, template, resources) for key, item in value.items()}
    function, argument = next(iter(value.items()))
    if function == "Ref":
        return PSEUDO[argument] if argument in PSEUDO else resources.attributes(argument, template)["Ref"]
    if function == "Fn::GetAtt":
        logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
        return resources.attributes(logical_id, template).get(attribute, f"unresolved:{logical_id}.{attribute}")
    if function == "Fn::Join":
        separator, parts = argument
        return separator.join(str(resolve(part, template, resources)) for part in parts)
    if function == "Fn::Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(_sub_value(m.group(1), variables, template, resources)), text)
    if function == "Fn::Select":
        index, items = argument
        return resolve(items, template, resources)[int(index)]
    if function == "Fn::Split":
        separator, text = argument
        return str(resolve(text, template, resources)).split(separator)
    raise PolicyModelError(f"intrinsic {function} is not modelled in tests/support/iam.py: add it")


def _sub_value(name: str, variables: Mapping[str, Any], template: Mapping[str, Any], resources: Resources) -> Any:
    if name in variables:
        return resolve(variables[name], template, resources)
    if name in PSEUDO:
        return PSEUDO[name]
    logical_id, _, attribute = name.partition(".")
    return resources.attributes(logical_id, template)[attribute or "Ref"]


def roles_of(template: Mapping[str, Any], resources: Resources) -> dict[str, Policy]:
    """Every role's policy (by the role's logical id), its statements resolved; SQS queue policies and S3 bucket
    policies apply as resource policies."""
    statements: dict[str, list[dict[str, Any]]] = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            for inline in resource["Properties"].get("Policies", []):
                statements.setdefault(logical_id, []).extend(inline["PolicyDocument"]["Statement"])
            statements.setdefault(logical_id, [])
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            for role in resource["Properties"].get("Roles", []):
                statements.setdefault(role["Ref"], []).extend(resource["Properties"]["PolicyDocument"]["Statement"])
    queue_statements = tuple(
        resolve(statement, template, resources)
        for resource in template["Resources"].values() if resource["Type"] in RESOURCE_POLICY_TYPES
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    )
    return {role: Policy(role, tuple(_flat(resolve(s, template, resources)) for s in found), queue_statements)
            for role, found in statements.items()}


RESOURCE_POLICY_TYPES = ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy")


def _flat(statement: dict[str, Any]) -> dict[str, Any]:
    """The statement with resources that resolved to several ARNs listed flat."""
    for key in ("Resource", "NotResource"):
        if isinstance(statement.get(key), list):
            statement[key] = [arn for item in statement[key] for arn in (item if isinstance(item, list) else [item])]
    return statement


def role_of_function(template: Mapping[str, Any], handler: str) -> str:
    """The logical id of the role of the one Lambda function running ``handler``."""
    roles = {resource["Properties"]["Role"]["Fn::GetAtt"][0] for resource in template["Resources"].values()
             if resource["Type"] == "AWS::Lambda::Function" and resource["Properties"].get("Handler") == handler}
    if len(roles) != 1:
        raise PolicyModelError(f"expected one function with handler {handler!r} in the template, found roles {sorted(roles)}")
    return roles.pop()


def task_role(template: Mapping[str, Any]) -> str:
    """The logical id of the container worker's ECS task role."""
    (role,) = {resource["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0] for resource in template["Resources"].values()
               if resource["Type"] == "AWS::ECS::TaskDefinition"}
    return role


# ---------------------------------------------------------------------------------------------- calls to requests

_SQS_ACTIONS = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
                "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
# S3 calls on one object, and the action IAM authorizes each as:
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html
_S3_OBJECT_ACTIONS = {"GetObject": "GetObject", "HeadObject": "GetObject", "PutObject": "PutObject",
                      "DeleteObject": "DeleteObject", "CopyObject": "PutObject", "CreateMultipartUpload": "PutObject",
                      "UploadPart": "PutObject", "CompleteMultipartUpload": "PutObject",
                      "AbortMultipartUpload": "AbortMultipartUpload", "GetObjectTagging": "GetObjectTagging",
                      "PutObjectTagging": "PutObjectTagging"}
# S3 calls on the bucket that IAM authorizes as ListBucket.
_S3_LIST_OPERATIONS = frozenset({"ListObjects", "ListObjectsV2", "HeadBucket"})
_DYNAMODB_ITEM_ACTIONS = {"GetItem": "Key", "PutItem": "Item", "UpdateItem": "Key", "DeleteItem": "Key"}
_TRANSACT_ACTIONS = {"Put": ("PutItem", "Item"), "Update": ("UpdateItem", "Key"), "Delete": ("DeleteItem", "Key"),
                     "ConditionCheck": ("ConditionCheckItem", "Key"), "Get": ("GetItem", "Key")}


@dataclass
class Tables:
    """Each table's partition key attribute, by table name (for ``dynamodb:LeadingKeys`` of a Query)."""

    partition_keys: dict[str, str] = field(default_factory=dict)


def authorization(service: str, operation: str, params: Mapping[str, Any], tables: Tables) -> list[Request]:
    """The authorizations one call needs (all must be allowed), per the Service Authorization Reference."""
    base = {"aws:SecureTransport": True}  # the runtime's clients use AWS's HTTPS endpoints
    if service == "sqs":
        action = f"sqs:{_SQS_ACTIONS.get(operation, operation)}"
        if "QueueUrl" in params:
            return [Request(action, _queue_arn(params["QueueUrl"]), base)]
        if operation == "GetQueueUrl":
            account = params.get("QueueOwnerAWSAccountId", ACCOUNT)
            return [Request(action, f"arn:{PARTITION}:sqs:{REGION}:{account}:{params['QueueName']}", base)]
        return [Request(action, "*", base)]
    if service == "dynamodb":
        return _dynamodb(operation, params, tables, base)
    if service == "s3" and "Bucket" in params:
        return _s3(operation, params, base)
    if service == "secretsmanager" and "SecretId" in params:
        secret = params["SecretId"]
        arn = secret if secret.startswith("arn:") else f"arn:{PARTITION}:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret}"
        return [Request(f"secretsmanager:{operation}", arn, base)]
    if service == "ssm" and "Name" in params:
        name = params["Name"]
        arn = name if name.startswith("arn:") else f"arn:{PARTITION}:ssm:{REGION}:{ACCOUNT}:parameter/{name.lstrip('/')}"
        return [Request(f"ssm:{operation}", arn, base)]
    return [Request(f"{service}:{operation}", "*", base)]


def _s3(operation: str, params: Mapping[str, Any], base: dict[str, Any]) -> list[Request]:
    """An object call on ``arn:aws:s3:::<bucket>/<key>``, a bucket call on ``arn:aws:s3:::<bucket>``."""
    bucket = f"arn:{PARTITION}:s3:::{params['Bucket']}"
    if operation == "CopyObject":  # GetObject on the source, PutObject on the copy
        source = params["CopySource"]
        source_arn = (f"arn:{PARTITION}:s3:::{source['Bucket']}/{source['Key']}" if isinstance(source, Mapping)
                      else f"arn:{PARTITION}:s3:::{str(source).lstrip('/')}")
        return [Request("s3:GetObject", source_arn, base), Request("s3:PutObject", f"{bucket}/{params['Key']}", base)]
    if operation in _S3_OBJECT_ACTIONS:
        return [Request(f"s3:{_S3_OBJECT_ACTIONS[operation]}", f"{bucket}/{params['Key']}", base)]
    if operation == "DeleteObjects":
        return [Request("s3:DeleteObject", f"{bucket}/{item['Key']}", base) for item in params["Delete"]["Objects"]]
    if operation in _S3_LIST_OPERATIONS:
        return [Request("s3:ListBucket", bucket, base)]
    return [Request(f"s3:{operation}", bucket, base)]


def _queue_arn(url: str) -> str:
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:{PARTITION}:sqs:{REGION}:{account}:{name}"


def _table_arn(name: str) -> str:
    return name if name.startswith("arn:") else f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def _dynamodb(operation: str, params: Mapping[str, Any], tables: Tables, base: dict[str, Any]) -> list[Request]:
    def item_request(action: str, table: str, keys: Iterable[Mapping[str, Any]]) -> Request:
        leading = sorted({_partition_value(key, table, tables) for key in keys})
        return Request(f"dynamodb:{action}", _table_arn(table), {**base, "dynamodb:LeadingKeys": leading})

    if operation in _DYNAMODB_ITEM_ACTIONS:
        return [item_request(operation, params["TableName"], [params[_DYNAMODB_ITEM_ACTIONS[operation]]])]
    if operation == "BatchWriteItem":
        return [item_request(operation, table, [w.get("PutRequest", {}).get("Item") or w["DeleteRequest"]["Key"] for w in writes])
                for table, writes in params["RequestItems"].items()]
    if operation == "BatchGetItem":
        return [item_request(operation, table, request["Keys"]) for table, request in params["RequestItems"].items()]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        requests = []
        for entry in params["TransactItems"]:
            ((kind, body),) = entry.items()
            action, key_field = _TRANSACT_ACTIONS[kind]
            requests.append(item_request(action, body["TableName"], [body[key_field]]))
        return requests
    if operation == "Query":
        resource = _table_arn(params["TableName"]) + (f"/index/{params['IndexName']}" if "IndexName" in params else "")
        context = {**base, "dynamodb:LeadingKeys": [_query_partition_value(params, tables)]}
        return [Request("dynamodb:Query", resource, context)]
    if operation == "ListStreams":
        return [Request("dynamodb:ListStreams", "*", base)]
    if "StreamArn" in params:
        return [Request(f"dynamodb:{operation}", params["StreamArn"], base)]
    if "TableName" in params:
        return [Request(f"dynamodb:{operation}", _table_arn(params["TableName"]), base)]
    return [Request(f"dynamodb:{operation}", "*", base)]


def _partition_value(key: Mapping[str, Any], table: str, tables: Tables) -> str:
    attribute = tables.partition_keys.get(table.rsplit("/", 1)[-1])
    if attribute is None:
        raise PolicyModelError(f"table {table!r}'s partition key is unknown to the IAM model: name it in Tables")
    return str(next(iter(key[attribute].values())))


def _query_partition_value(params: Mapping[str, Any], tables: Tables) -> str:
    """The partition key value of a Query's KeyConditionExpression (``pk = :v`` or ``#n = :v``)."""
    attribute = tables.partition_keys.get(params["TableName"])
    names = dict(params.get("ExpressionAttributeNames", {}).items())
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", params.get("KeyConditionExpression", "")):
        if names.get(left, left) == attribute:
            return str(next(iter(params["ExpressionAttributeValues"][right].values())))
    raise PolicyModelError(f"no partition key equality on {attribute!r} in KeyConditionExpression "
                           f"{params.get('KeyConditionExpression')!r}")


# ------------------------------------------------------------------------------------------------------ enforcing

# The modules whose frames name the acting role: the outermost such frame on the stack decides.
# None marks operator and local tooling: their calls (and what they run) are not a deployed role's.
ROLE_OF_MODULE: dict[str, str | None] = {
    "worker_tier_cli": None,
    "worker_tier.__main__": "container",
    "worker_tier.container.consumer": "container",
    "worker_tier.handlers.worker": "worker",
    "worker_tier.worker.batch": "worker",
    "worker_tier.handlers.dispatcher": "dispatcher",
    "worker_tier.handlers.scheduler": "dispatcher",
    "worker_tier.delays.dispatcher": "dispatcher",
    "worker_tier.handlers.recovery": "recovery",
    "worker_tier.delays.delay_recovery": "recovery",
    "worker_tier.handlers.periodic": "periodic",
    "worker_tier.handlers.cron": "periodic",
    "worker_tier.periodic.ticks": "periodic",
    "worker_tier.producer.client": "producer",
    "worker_tier.delays.cancellation": "producer",
}
ROLES = ("worker", "container", "dispatcher", "recovery", "periodic", "producer")


THREAD_ROLE_ATTRIBUTE = "_worker_tier_iam_role"


def any_runtime_frame(frame: Any) -> bool:
    """True when a frame of a module in ROLE_OF_MODULE is on the stack from ``frame``."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if any(module == prefix or module.startswith(prefix + ".") for prefix in ROLE_OF_MODULE):
            return True
        frame = frame.f_back
    return False


def _start_with_role(start: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    """``Thread.start`` that first records the starting code's role on the thread: a thread's own stack (the
    heartbeat's loop) names no entry point, yet its calls are the role's that started it."""

    def started(thread: threading.Thread) -> None:
        kind = ENFORCEMENT._acting or acting_role_kind(sys._getframe(1))
        if kind is None:
            kind = getattr(threading.current_thread(), THREAD_ROLE_ATTRIBUTE, None)
        setattr(thread, THREAD_ROLE_ATTRIBUTE, kind)
        start(thread)

    started.__wrapped__ = start  # type: ignore[attr-defined]
    return started


def acting_role_kind(frame: Any) -> str | None:
    """The role of the outermost runtime entry point on the stack from ``frame``; None for setup and operators."""
    found: str | None = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        for prefix, kind in ROLE_OF_MODULE.items():
            if module == prefix or module.startswith(prefix + "."):
                if kind is None:
                    return None
                found = kind
                break
        frame = frame.f_back
    return found


@dataclass(frozen=True)
class Denial:
    role: str
    request: Request
    reason: str

    def __str__(self) -> str:
        return f"IAM denied role {self.role}: {self.request}: {self.reason}"


@dataclass
class World:
    """The policies of one test world: each role kind's policy, and the tables' partition keys."""

    policies: dict[str, Policy]
    tables: Tables

    def to_json(self) -> str:
        return json.dumps({"policies": {kind: [p.name, p.statements, p.resource_statements] for kind, p in self.policies.items()},
                           "partition_keys": self.tables.partition_keys})

    @classmethod
    def from_json(cls, text: str) -> World:
        data = json.loads(text)
        policies = {kind: Policy(name, tuple(statements), tuple(resource)) for kind, (name, statements, resource) in data["policies"].items()}
        return cls(policies, Tables(data["partition_keys"]))

    def without(self, kind: str, action: str) -> World:
        """This world with ``action`` taken out of role ``kind``'s statements (a statement left with none goes)."""
        policy = self.policies[kind]
        kept = []
        for statement in policy.statements:
            actions = _listed(statement.get("Action", []))
            if action not in actions:
                kept.append(statement)
            elif len(actions) > 1:
                kept.append({**statement, "Action": [a for a in actions if a != action]})
        return World({**self.policies, kind: Policy(policy.name, tuple(kept), policy.resource_statements)}, self.tables)


class Enforcement:
    """Checks every botocore call of a role against that role's policy while a world is active."""

    def __init__(self) -> None:
        self._world: World | None = None
        self._acting: str | None = None
        self.denial_file = ""  # in a subprocess: where each denial is appended for the test to read
        self._lock = threading.Lock()
        self.denials: list[Denial] = []
        self._harness = threading.local()

    @property
    def world(self) -> World | None:
        return self._world

    @contextlib.contextmanager
    def acting_as(self, kind: str) -> Iterator[None]:
        """Every call (of any thread) in the block is role ``kind``'s: for runtime code with no entry point of its own."""
        self._acting = kind
        try:
            yield
        finally:
            self._acting = None

    @contextlib.contextmanager
    def harness(self) -> Iterator[None]:
        """This thread's calls in the block are the test harness's own (a stand-in reading a table's key schema), no role's."""
        self._harness.active = True
        try:
            yield
        finally:
            self._harness.active = False

    def activate(self, world: World | None) -> None:
        with self._lock:
            self._world = world
            self.denials = []

    def check(self) -> list[Denial]:
        """The denials since activation, and deactivate."""
        with self._lock:
            found, self._world, self.denials = self.denials, None, []
        return found

    def before_parameter_build(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        world = self._world
        if world is None or getattr(self._harness, "active", False):
            return
        frame = sys._getframe(1)
        if self._acting:
            kind: str | None = self._acting
        elif any_runtime_frame(frame):
            kind = acting_role_kind(frame)
        else:  # a thread runtime code started (the heartbeat's): its starter's role
            kind = getattr(threading.current_thread(), THREAD_ROLE_ATTRIBUTE, None)
        if kind is None:
            return
        policy = world.policies.get(kind)
        if policy is None:
            raise PolicyModelError(f"role kind {kind!r} has no policy in this test world; give World one")
        service = model.service_model.signing_name
        try:
            requests = authorization(service, model.name, params, world.tables)
        except PolicyModelError as error:  # recorded too: the runtime may catch it, the test must not pass
            self._record(Denial(policy.name, Request(f"{service}:{model.name}", "?"), str(error)))
            raise
        for request in requests:
            decision = policy.decide(request)
            if not decision.allowed:
                denial = Denial(policy.name, request, decision.reason)
                self._record(denial)
                raise _access_denied(model.name, str(denial))

    def _record(self, denial: Denial) -> None:
        with self._lock:
            self.denials.append(denial)
        if self.denial_file:
            with open(self.denial_file, "a", encoding="utf-8") as out:
                out.write(str(denial).replace("\n", " ") + "\n")


def _access_denied(operation: str, message: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


ENFORCEMENT = Enforcement()


def install() -> Enforcement:
    """Add the handler to botocore's built-in handlers (once): every session and client made afterwards carries it."""
    import botocore.handlers

    handler = ("before-parameter-build", ENFORCEMENT.before_parameter_build)
    if handler not in botocore.handlers.BUILTIN_HANDLERS:
        botocore.handlers.BUILTIN_HANDLERS.append(handler)
    if not hasattr(threading.Thread.start, "__wrapped__"):
        threading.Thread.start = _start_with_role(threading.Thread.start)  # type: ignore[method-assign]
    return ENFORCEMENT


WORLD_VARIABLE = "WORKER_TIER_TEST_IAM_WORLD"  # a file holding World.to_json()
DENIALS_VARIABLE = "WORKER_TIER_TEST_IAM_DENIALS"  # a file each denial is appended to


def install_from_environment() -> None:
    """In a subprocess (tests/support/iam_site/sitecustomize.py): enforce the world the test process wrote."""
    import os

    with open(os.environ[WORLD_VARIABLE], encoding="utf-8") as world:
        install().activate(World.from_json(world.read()))
    ENFORCEMENT.denial_file = os.environ[DENIALS_VARIABLE]


def world_of(template: Mapping[str, Any], resources: Resources, roles: Mapping[str, str]) -> World:
    """The world of ``roles`` (role kind -> role logical id) in ``template``, against ``resources``."""
    policies = roles_of(template, resources)
    partition_keys = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] in ("AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table"):
            name = resources.tables.get(stem_of(logical_id))
            if name is not None:
                (hash_key,) = [k["AttributeName"] for k in resource["Properties"]["KeySchema"] if k["KeyType"] == "HASH"]
                partition_keys[name] = hash_key
    return World({kind: policies[role] for kind, role in roles.items()}, Tables(partition_keys))


def denial_lines(denials: Sequence[Denial]) -> str:
    return "\n".join(dict.fromkeys(str(denial) for denial in denials))
