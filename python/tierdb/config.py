"""The ZConfig factory behind `<tierdb>` sections (component.xml)."""

from ZODB.config import BaseConfig


class TierStorageFactory(BaseConfig):
    def open(self, database_name="unnamed", databases=None):
        from .zodb import TierStorage
        c = self.config
        return TierStorage(
            c.url, create=c.create, read_only=c.read_only, cache_dir=c.cache_dir,
            cache_bytes=c.cache_bytes, memory_bytes=c.memory_bytes, write_mode=c.write_mode,
            blob_dir=c.blob_dir, pack_gc=c.pack_gc, name=c.name)
