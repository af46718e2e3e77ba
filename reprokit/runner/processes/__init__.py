"""What starts and watches processes: every child a run (and a tool) starts goes through here.

stage.py is the executor seam (one stage, one process: ``LocalExecutor``; ``run_command`` and
``stage_dag`` for a child outside a run's DAG: wrap's script, a short repro run alone, merge's
``--list-stages``); procs.py and watchdog.py drive a child as nox does (its own process group,
capped logs, TERM then KILL of the group); warm.py and warm_server.py fork stages from a server
that imported torch already; ray_executor.py and stage_files.py run them on a Ray cluster;
result_cache.py reuses a stage whose inputs did not change; executors.py picks one; signals.py
is how an interrupt reaches them. The scheduler above knows none of them but through
``Executor`` and ``make_executor``.
"""
