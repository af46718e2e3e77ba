"""What starts and watches processes: every child a run (and a tool) starts goes through here,
but the short probes of infra/probe.py (tests/test_layout.py keeps it so).

stage.py is the executor seam (one stage, one process: ``LocalExecutor``; ``run_command`` and
``stage_dag`` for a child outside a run's DAG: wrap's script, a model sweep's capture, merge's
``--list-stages``); alone.py runs a repro alone, the one way every tool does; procs.py and
watchdog.py drive a child as nox does (its own process group, capped logs, TERM then KILL of
the group; ``started_early``: a child that starts now and is asked later, capture's load-back
check); warm.py and warm_server.py fork stages from a server that imported torch already,
offload_child.py is what such a fork runs for torch work the harness offloads; ray_executor.py
and stage_files.py run stages on a Ray cluster, ray_actors.py the op sweep's workers there;
result_cache.py reuses a stage whose inputs did not change; executors.py picks one; signals.py
is how an interrupt reaches them. The scheduler above knows none of them but through
``Executor`` and ``make_executor``.
"""
