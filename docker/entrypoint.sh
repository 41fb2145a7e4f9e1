#!/bin/sh
# The image's entrypoint: run the command as the user `brain`, never as root.
#
# Started as root (the image's default), it only drops to `brain` and becomes the command.
# Processes Docker starts beside it stay root's: the health check, `docker exec`, and the
# init process of `--init`. Their environment (BRAIN_API_TOKEN, BRAIN_DATABASE_URL and the
# workflows' secrets) is then unreadable through /proc by the steps, which run as `brain`,
# as The Brain keeps its own (SPEC §11).
#
# Started as another user (`docker run --user`, Kubernetes' runAsUser), it runs the command
# as that user, unchanged. See docs/deploy.md.
set -eu
if [ "$(id -u)" = 0 ]; then
    # brain's own home (the PostgreSQL driver looks for client certificates there)
    export HOME=/srv/brain USER=brain LOGNAME=brain
    exec setpriv --reuid=brain --regid=brain --init-groups --no-new-privs -- "$@"
fi
exec "$@"
