"""A lakeFS stand-in on 127.0.0.1: the REST API subset that `lakefs-spec` and `lakefs` use.

No lakeFS binary can be installed where the tests run, so `LakeFSServer` implements the
lakeFS REST API (`/api/v1`, per lakeFS's OpenAPI spec) over a local folder: repositories,
branches, tags, commits, ref expressions (`main@`, `main~2`, `main^1`, tags, commit ids),
staged vs committed objects, ranged reads, paged listings, diff, merge, revert and
branch protection. Object data and metadata live on disk in its data folder, so it can
stop and start again on the same port with its data (an outage). It imports neither
TensorFlow nor Keras: `python -m remote_keras.testing.lakefs` serves one from its own
process.

Modules: `model` (repositories, commits, trees, staging, paging), `refs` (the commit
graph), `store` (SQLite persistence), `state` (shared operations), `handlers` (the REST
handlers, each declaring its routes), `transport` (routing and HTTP), `server`
(`LakeFSServer`, `LakeFSDataServer`, `lakefs_target`).

`lakefs_target()` picks where lakeFS tests run: a real lakeFS when
`REMOTE_KERAS_LAKEFS_URL` (plus `REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID` and
`REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY`) is set, this stand-in otherwise.
"""

from remote_keras.testing.lakefs.model import ApiError
from remote_keras.testing.lakefs.server import (
    ENV_ACCESS_KEY_ID,
    ENV_SECRET_ACCESS_KEY,
    ENV_URL,
    LakeFSDataServer,
    LakeFSServer,
    LakeFSTarget,
    lakefs_target,
    main,
)

__all__ = [
    "ENV_ACCESS_KEY_ID",
    "ENV_SECRET_ACCESS_KEY",
    "ENV_URL",
    "ApiError",
    "LakeFSDataServer",
    "LakeFSServer",
    "LakeFSTarget",
    "lakefs_target",
    "main",
]
