"""Recording inside a running program: regions and marks (:mod:`.recorder`, over the native
``pytimings._core``), the CUDA runtime it loads (:mod:`.cuda`), region statistics
(:mod:`.summary`), ``save`` (:mod:`.storage`), torch.distributed wrappers
(:mod:`.distributed`, with nccl-tests' byte factors in :mod:`.nccl`) and per-request
timelines (:mod:`.requests`); ``pytimings record``'s startup hook (:mod:`.launch`), the torch
patches it applies (:mod:`.hooks`) and its Kineto step capture (:mod:`.kineto`).
The public names are re-exported by ``pytimings``.
"""
