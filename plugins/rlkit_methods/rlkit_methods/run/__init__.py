"""Run management: what makes a training run a run on disk and on the terminal, apart from
the loop's arithmetic — the run folder's lock and ownership (:mod:`.rundir`), atomic
checkpoints (:mod:`.checkpoint`), the loop's state files (:mod:`.state`), resume checks
(:mod:`.resume`), signals (:mod:`.signals`), checkpoint rotation (:mod:`.rotation`), the
stop on a diverging run (:mod:`.divergence`), a word while a long call runs (:mod:`.heartbeat`), the metrics file and trackers
(:mod:`.metrics_log`, :mod:`.tracking`), what a person sees while training (:mod:`.console`)
and the end-of-run report (:mod:`.end_report`). The loop (:mod:`rlkit_methods.loop`) uses it;
engines never do."""
