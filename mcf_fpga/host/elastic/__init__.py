"""Elastic decode (KernelFlume): W/A roles, the routing table, the scaling policy, the
microbatch pipeline model and an elastic decode run on golden.

Modules (one concept each):

* ``roles``     W nodes (weights; may be a tensor-parallel group) and A nodes (KV token ranges).
* ``routing``   token ranges -> A node, versioned snapshots published at token boundaries,
                encoding into the NIC's route-table entries.
* ``scaling``   C_thresh, post-prefill N_A, predictive scale-up from the fill horizon,
                scale-down, node pool limits (admission waits, nothing is dropped).
* ``pipeline``  G_pipe model and a discrete-event W/A schedule (query-first dispatch).
* ``golden_run`` prefill on golden.IntModel, then decode with A nodes added and removed.

See docs/elastic.md.
"""
