# frozen_string_literal: true

# Puma's settings for the end-to-end tests, limiter or not (workers, threads and the
# bind come from the command line). A worker accepts a connection only when a thread
# of it can serve the request now: with the reactor on (the default), a worker whose
# threads are all busy can still take a connection in, and a light tenant's request
# then waits there behind a heavy tenant's 5 ms one while another worker is idle.
# Behind a buffering proxy (nginx), as Puma is usually deployed, nothing is lost.
queue_requests false
