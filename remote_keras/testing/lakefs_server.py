"""The lakeFS stand-in's former module; it lives in `remote_keras.testing.lakefs` now.

Kept so that `from remote_keras.testing.lakefs_server import LakeFSServer, lakefs_target`
and running this file as a script (`python .../lakefs_server.py`) keep working.
"""

from remote_keras.testing.lakefs import (
    ENV_ACCESS_KEY_ID,
    ENV_SECRET_ACCESS_KEY,
    ENV_URL,
    ApiError,
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
    "LakeFSServer",
    "LakeFSTarget",
    "lakefs_target",
    "main",
]

if __name__ == "__main__":
    main()
