#!/bin/sh
# drover's preinstall (.deb preinst, .rpm %pre): the system user drover,
# whose home /var/lib/drover is the runner's working directory.
set -e
if ! getent group drover >/dev/null 2>&1; then
	groupadd --system drover
fi
if ! getent passwd drover >/dev/null 2>&1; then
	useradd --system --gid drover --home-dir /var/lib/drover --no-create-home \
		--shell /bin/bash --comment "drover CI runner" drover
fi
