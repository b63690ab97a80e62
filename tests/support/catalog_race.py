"""A local Storage on which another writer's catalog entry lands first: the moment a
writer creates its next log entry of `group`, `rival(catalog)` is appended before it, so
the writer loses the compare-and-swap and must make its entry again from what won."""

from kafka_archive import catalog
from kafka_archive.storage import Storage


class RivalLandsFirst(Storage):
    def __init__(self, cfg, group: str, rival):
        super().__init__()
        self.cfg, self.group, self.rival, self.raced = cfg, group, rival, False

    def put_if(self, url, data, expected_version, content_type="application/octet-stream"):
        if f"/_catalog/{self.group}/log/" in url and not self.raced:
            self.raced = True
            catalog.append(Storage(), self.cfg, self.group, self.rival)
        return super().put_if(url, data, expected_version, content_type)
