"""The stand-in's REST handlers; importing this package registers their routes.

Each module declares its routes next to its handlers (`transport.route`):
`repositories` (health, config, repositories, branch protection), `branches` (branches and
tags), `commits` (commit, log, diff, merge, revert), `objects` (reads, listings, uploads,
deletes, copies) and `staging` (staging-area uploads and presigned URLs).
"""

from remote_keras.testing.lakefs.handlers import (  # noqa: F401 - registers the routes
    branches,
    commits,
    objects,
    repositories,
    staging,
)
