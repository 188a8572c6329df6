#!/bin/sh
# drover's postinstall (.deb postinst with "configure" [old version],
# .rpm %post with 1 on install, 2 on upgrade). As GitLab Runner's runs
# gitlab-runner install: when systemd is the init system, the service
# drover is (re)written and enabled; a fresh installation starts it, an
# upgrade restarts it if it runs (the stop drains: running jobs finish
# first). /etc/drover/config.toml is written without runners when missing
# (drover install does it) and never replaced: it is not a file of the
# package.
set -e
upgrade=false
case "$1" in
configure) if [ -n "$2" ]; then upgrade=true; fi ;;
[0-9]*) if [ "$1" -ge 2 ]; then upgrade=true; fi ;;
esac
chown drover:drover /etc/drover /var/lib/drover
if [ ! -d /run/systemd/system ]; then
	echo "drover: systemd is not the init system here: no service installed; run" >&2
	echo "  drover run --config /etc/drover/config.toml --working-directory /var/lib/drover" >&2
	echo "as the user drover under this machine's supervisor" >&2
	exit 0
fi
/usr/bin/drover install --user drover --working-directory /var/lib/drover \
	--config /etc/drover/config.toml --force
if [ "$upgrade" = true ]; then
	if systemctl is-active --quiet drover.service; then
		echo "drover: restarting drover.service (running jobs finish first)"
		/usr/bin/drover restart
	fi
else
	/usr/bin/drover start
fi
