"""rctl's decision engine for Python.

A compiled ruleset (``rctl compile``'s artifact) decides Arrow record
batches, Arrow tables or pandas frames of requests in the ``webrequest``
schema (``dt`` or ``ts``, ``ip``, ``uri_host``, ``uri_path``,
``uri_query``, ``http_method``, ``user_agent``, ``referer``,
``accept_language``, ``x_analytics``, ``accept``, ``range``), one call
into Rust per batch::

    import rctl
    rs = rctl.Ruleset.load("ruleset.rctlc")
    verdicts = rs.decide(frame)        # verdict, rule, status, reason per row

``rctl.spark`` runs ``rctl dry-run``'s analysis of a whole table on Spark.
The manual is ``dataplane/python/README.md`` in rctl's repository.
"""

import pyarrow as pa

from ._rctl import ArtifactError, RctlError, SchemaError, Tally
from ._rctl import Ruleset as _Ruleset

__all__ = ["Ruleset", "Tally", "RctlError", "ArtifactError", "SchemaError"]


def _batches(data):
    """The record batches of a RecordBatch, Table or pandas DataFrame,
    and whether the input was pandas."""
    if isinstance(data, pa.RecordBatch):
        return [data], False
    if isinstance(data, pa.Table):
        return data.combine_chunks().to_batches(), False
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        return [pa.RecordBatch.from_pandas(data, preserve_index=False)], True
    raise TypeError(
        "expected a pyarrow RecordBatch or Table, or a pandas DataFrame, not %s"
        % type(data).__name__
    )


class Ruleset:
    """A compiled ruleset, loaded to decide requests.

    ``artifact`` is the artifact's bytes; ``site`` the site whose rules
    apply (None: the rules that name no site). An artifact of another
    format version, or corrupt, raises ``ArtifactError``.
    """

    def __init__(self, artifact, site=None):
        self._inner = _Ruleset(bytes(artifact), site)
        self.artifact = bytes(artifact)
        self.site = site

    @classmethod
    def load(cls, path, site=None):
        """Loads the artifact at ``path``."""
        with open(path, "rb") as f:
            return cls(f.read(), site)

    @property
    def rule_names(self):
        """The rules' names, in evaluation order."""
        return self._inner.rule_names()

    @property
    def throttles(self):
        """Indices of the throttle rules on the request path, in evaluation order."""
        return self._inner.throttles()

    def columns(self, schema):
        """The columns of a table of this pyarrow schema that a decision
        reads (and the report counts). A table without ``ip`` or a time
        (``ts`` or ``dt``), or with one of them not text, raises
        ``SchemaError``."""
        return self._inner.columns(schema)

    def missing(self, schema):
        """The fields the ruleset reads that a table of this schema
        lacks: rules reading them are not judged on it."""
        return self._inner.missing(schema)

    def decide(self, data):
        """Decides every row, in order, with this ruleset's limiters
        (which count across calls, on the rows' own times). Returns the
        same kind as given (a RecordBatch for a RecordBatch, a Table for
        a Table, a DataFrame for a DataFrame) with one row per request:
        ``verdict`` (pass, allow, deny, throttle, drop; ``unknown`` where
        the table lacks a field a deciding rule reads; ``bad`` for a row
        that is not a request), ``rule``, ``status`` and ``reason`` (why a
        row is bad)."""
        batches, was_pandas = _batches(data)
        out = [self._inner.decide(b) for b in batches]
        if isinstance(data, pa.RecordBatch):
            return out[0]
        if out:
            table = pa.Table.from_batches(out)
        else:
            table = pa.table({"verdict": [], "rule": [], "status": [], "reason": []})
        return table.to_pandas() if was_pandas else table

    def stage(self, batch):
        """One stage of the distributed dry run (see ``rctl.spark``)."""
        return self._inner.stage(batch)

    def hit(self, rule, batch):
        """Runs throttle rule ``rule``'s limiter over the batch's rows, in order."""
        return self._inner.hit(rule, batch)

    def tally(self, name):
        """A dry-run report to count rows whose throttles are all known into."""
        return self._inner.tally(name)
