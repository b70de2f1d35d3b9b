"""hipObject for PyTorch: ``hipobj.torch.dcp`` (torch.distributed.checkpoint storage over RDMA).
Imports torch only when its modules are imported."""
