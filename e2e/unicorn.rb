# frozen_string_literal: true

# Unicorn's settings for `test_crash.py`: two workers forked from a master that loaded
# the app (and opened the table) first, and the shortest timeout Unicorn takes: a
# worker whose request runs longer is killed with SIGKILL by the master.
worker_processes 2
preload_app true
timeout 3
