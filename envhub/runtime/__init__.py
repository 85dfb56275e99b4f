"""What runs an episode in-process, below every transport: the session and its budgets
(:mod:`.session`), wire validation worded once (:mod:`.validation`), client-settable
options (:mod:`.client_options`), cleanup that never raises (:mod:`.cleanup`), the
blocking bridge for scripts and gymnasium (:mod:`.sync` on :mod:`.loop_thread`), and the
services plugins build on: the build-once cache (:mod:`.cache`) and the background loop.
"""
