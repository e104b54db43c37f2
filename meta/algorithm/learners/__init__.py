"""One meta-learner per file; `meta.algorithm.registry` names them."""
