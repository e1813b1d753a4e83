#!/usr/bin/perl
# emu/cu2cpp.pl IN > OUT: the CUDA source IN with each kernel launch
#   kernel<<<grid, block[, smem[, stream]]>>>(args)
# rewritten as the emulator's call (emu/cuda_emu.h)
#   emu_launch("kernel", kernel, emu_cfg(grid, block[, smem[, stream]]), args)
# and each declaration of dynamic shared memory
#   extern __shared__ [__align__(n)] TYPE name[];
# as a pointer to the block's (emu_dynamic_smem: one allocation of the launch's size per block)
#   TYPE* const name = (TYPE*)emu_dynamic_smem();
# Everything else is copied as it is.
use strict;
use warnings;
local $/;
my $src = <>;
$src =~ s/([A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(\s*(\)?)/"emu_launch(\"$1\", $1, emu_cfg($2)" . ($3 ? ")" : ", ")/gse;
$src =~ s/\bextern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w ]*?)\s*([A-Za-z_]\w*)\s*\[\s*\]\s*;/$1* const $2 = ($1*)emu_dynamic_smem();/g;
die "cu2cpp.pl: an extern __shared__ declaration was left unrewritten\n" if $src =~ /\bextern\s+__shared__/;
die "cu2cpp.pl: a launch was left unrewritten\n" if $src =~ /<<</;
print $src;
