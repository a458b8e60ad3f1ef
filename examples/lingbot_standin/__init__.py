"""A stand-in for the LingBot-World realtime TP1SP4 pipeline (random weights),
reproducing the operator structure of ../shared/seeds/coverage_audit.seed.json
(SPEC section 6). Module classes and functions carry LingBot-World's names
(WanModel, WanVAE / Decoder3d, save_video) so that, like the real job, it needs
no code change to be staged: lingprobe's stage map does it."""
