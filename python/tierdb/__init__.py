"""tierdb: a database engine on object storage, made fast by cache tiers.

`tierdb.zodb.TierStorage` is a ZODB storage on tierdb's versioned object store.
"""

__all__ = ["zodb"]
