#!/bin/sh
# drover's postremove (.deb postrm, .rpm %postun). dpkg --purge removes
# /etc/drover (config.toml holds the runners' tokens); the user drover and
# /var/lib/drover (builds, caches) stay, as Debian leaves system users.
set -e
if [ "$1" = purge ]; then
	rm -rf /etc/drover
fi
