#!/usr/bin/env bash
# Starts PostgreSQL and NATS JetStream when they are not answering (dev and CI machines run both).
set -u
up() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if ! up 5432; then
  echo "==> starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || echo "could not start PostgreSQL: start it and retry"
fi
if ! up 4222; then
  echo "==> starting NATS"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || echo "could not start NATS: start it and retry"
fi
for i in $(seq 1 50); do up 5432 && up 4222 && exit 0; sleep 0.2; done
echo "PostgreSQL (127.0.0.1:5432) or NATS (127.0.0.1:4222) is not answering; start them and retry" >&2
exit 1
