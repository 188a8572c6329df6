#!/bin/sh
# drover's preremove (.deb prerm with "remove" or "upgrade", .rpm %preun
# with 0 on removal, 1 on upgrade): on removal the service is stopped
# (drained: running jobs finish first), disabled and its unit removed; an
# upgrade leaves it to the new package's postinstall.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ] && [ -e /etc/systemd/system/drover.service ]; then
		/usr/bin/drover uninstall
	fi
	;;
esac
