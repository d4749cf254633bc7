"""The unit tests' DynamoDB: ``worker_tier.testing``'s ``MemoryTables``, with fault injection and eventual reads.

``MemoryTables`` is the one home of the in-memory DynamoDB's rules (the calls, the condition expressions,
DynamoDB's validation, ALL_OLD on refusal), checked against moto and dynalite in
tests/functional/test_testing_stand_ins.py. This adds what only the unit tests need: a ``fault`` that may
fail any call with an error code, ``unprocessed`` BatchWriteItem requests, the calls made (``calls``,
``count``), stale Query reads of deleted items (``stale``, ``settle``), a page size, and an index of
partitions so that large tables stay fast (``copy_items=False`` for benchmarks).
"""

from __future__ import annotations

from typing import Any, Callable

from worker_tier.testing.tables import MemoryTables, client_error

Fault = Callable[[str, dict[str, Any]], "str | None"]

__all__ = ["FakeDynamoDB", "client_error"]


class FakeDynamoDB(MemoryTables):
    """Tables keyed by (pk,) or (pk, sk); ``fault(operation, params)`` may return an error code to raise."""

    def __init__(self, fault: Fault | None = None) -> None:
        super().__init__()
        self.partitions: dict[str, dict[str, set[tuple]]] = {}
        self.calls: list[str] = []
        self.fault = fault or (lambda operation, params: None)
        self.unprocessed: Callable[[list[dict]], list[dict]] = lambda requests: []
        # Benchmarks turn copying off, so the fake's own cost does not swamp what is measured.
        self.copy_items = True
        # Eventually consistent reads: an item deleted since the last ``settle()`` may still be returned by a Query
        # without ConsistentRead, while ``stale(key)`` says so (DynamoDB gives no bound; about a second in practice).
        self.stale: Callable[[tuple], bool] = lambda key: False
        self.ghosts: dict[str, dict[tuple, dict[str, Any]]] = {}

    @property
    def page_size(self) -> int:
        """Items in a full page (DynamoDB's 1 MB)."""
        return self.page_items

    @page_size.setter
    def page_size(self, size: int) -> None:
        self.page_items = size

    def create_table(self, name: str, *key: str) -> None:
        super().create_table(name, *key)
        self.partitions[name] = {}

    def settle(self) -> None:
        """Every eventually consistent read from now on sees every write so far."""
        self.ghosts.clear()

    def count(self, operation: str) -> int:
        return sum(1 for name in self.calls if name == operation)

    # -- MemoryTables' hooks ------------------------------------------------------------

    def _called(self, operation: str, params: dict[str, Any]) -> None:
        self.calls.append(operation)
        code = self.fault(operation, {**{k: v for k, v in params.items() if k not in ("self", "_")}, **params.get("_", {})})
        if code is not None:
            raise client_error(code, operation)

    def _store(self, table: str, item: dict) -> None:
        super()._store(table, item)
        key = self._key(table, item)
        self.partitions[table].setdefault(key[0], set()).add(key)

    def _remove(self, table: str, key: tuple) -> None:
        removed = self._table(table).pop(key, None)
        if removed is not None:
            self.ghosts.setdefault(table, {})[key] = removed
        self.partitions[table].get(key[0], set()).discard(key)

    def _partition(self, table: str, partition: str, consistent: bool) -> dict[tuple, dict[str, Any]]:
        items = self.tables[table]
        found = {key: items[key] for key in self.partitions[table].get(partition, ()) if key in items}
        if not consistent:
            found.update({k: v for k, v in self.ghosts.get(table, {}).items() if k[0] == partition and k not in found and self.stale(k)})
        return found

    def _unprocessed(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.unprocessed(requests)

    def _copy(self, value: Any) -> Any:
        return super()._copy(value) if self.copy_items else value
