"""The lab's GPU-machine plumbing and device A/Bs (lab/README.md, lab/GPU-MACHINES.md): run as
`python3 -m lab.gpu.<name>` from the checkout's root on the machine."""
