"""Worker processes on real ``torch.distributed`` groups: a pool of ranks that serves cases
and names a failing or hung rank (``pool``), and what a prefill-context-parallel rank serves
with the check that P ranks equal one (``pcp``)."""
