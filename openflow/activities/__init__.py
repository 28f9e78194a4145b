"""Everything that touches the world, one module per activity.

    prepare_run.py     `prepare_run`: providers, models, tool catalog and folder of a new run
    model_turn.py      `model_turn`: one model call, its transcript, the reads run with it
    tool_batch.py      `tool_batch`: one batch of tool calls, its results and receipt stored
    read_receipt.py    `read_receipt`: what a batch whose completion was lost reported
    write_handoff.py   `write_handoff`: a node's handoff file

What they share is built once in `openflow.worker.make_activities` and passed in explicitly:
`run_files.RunFiles` (the run store, the run's workspace, the files a run writes once),
`transcripts.Transcripts`, `model_providers.ModelProviders` and `tools_runner.BatchDeps`
(tools, locks, budget, caches, staging of every tool batch). The activity modules are not
imported here, so importing the store (the API, the CLI) does not load providers and tools.
"""
