#!/usr/bin/perl
# emu/cu2cpp.pl IN > OUT: the CUDA source IN with each kernel launch
#   kernel<<<grid, block[, smem[, stream]]>>>(args)
# rewritten as the emulator's call (emu/cuda_emu.h)
#   emu_launch("kernel", kernel, emu_cfg(grid, block[, smem[, stream]]), args)
# Everything else is copied as it is.
use strict;
use warnings;
local $/;
my $src = <>;
$src =~ s/([A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(\s*(\)?)/"emu_launch(\"$1\", $1, emu_cfg($2)" . ($3 ? ")" : ", ")/gse;
die "cu2cpp.pl: a launch was left unrewritten\n" if $src =~ /<<</;
print $src;
