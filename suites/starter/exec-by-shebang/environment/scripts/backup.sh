#!/bin/sh
tar -czf /tmp/backup.tgz /srv/data
