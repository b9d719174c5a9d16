#!/usr/bin/env bash
# Installs lsfs as a system tool: the binary, the links mount(8) looks for,
# the man pages and the shell completions. Run as root (or give --prefix and
# --sbin you can write to). Safe to run again; --uninstall removes it all.
#
#   sudo scripts/install.sh                      # builds, installs under /usr/local
#   sudo scripts/install.sh --bin ~/.cargo/bin/lsfs   # installs a binary already built
#   sudo scripts/install.sh --uninstall
#
# What goes where (PREFIX=/usr/local, SBIN=/sbin by default):
#   PREFIX/bin/lsfs          on sh's default PATH, where mount.fuse3 finds it
#                            for `mount -t fuse.lsfs` (it runs the type's name
#                            with mount(8)'s PATH dropped)
#   SBIN/mount.fuse.lsfs     links to it: mount(8) runs these itself for
#   SBIN/mount.lsfs          `-t fuse.lsfs` and `-t lsfs` (it looks in /sbin only)
#   PREFIX/share/man/man1/lsfs.1, lsfs-mount.1, …        (`lsfs man --out`)
#   PREFIX/share/bash-completion/completions/lsfs        (bash-completion looks there)
#   PREFIX/share/zsh/site-functions/_lsfs
#   PREFIX/share/fish/vendor_completions.d/lsfs.fish
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=/usr/local
sbin=/sbin
bin=
uninstall=false
while (($#)); do
    case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --sbin) sbin=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --uninstall) uninstall=true; shift ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
done

man_dir=$prefix/share/man/man1
bash_file=$prefix/share/bash-completion/completions/lsfs
zsh_file=$prefix/share/zsh/site-functions/_lsfs
fish_file=$prefix/share/fish/vendor_completions.d/lsfs.fish

if $uninstall; then
    rm -fv "$prefix/bin/lsfs" "$sbin/mount.fuse.lsfs" "$sbin/mount.lsfs" \
        "$bash_file" "$zsh_file" "$fish_file"
    # Only lsfs's own pages: lsfs.1 and lsfs-*.1.
    rm -fv "$man_dir"/lsfs.1 "$man_dir"/lsfs-*.1
    echo "install.sh: lsfs removed from $prefix and $sbin"
    exit 0
fi

if [[ -z $bin ]]; then
    if ! command -v cargo >/dev/null; then
        echo "install.sh: cargo not found: build lsfs first and give --bin PATH" >&2
        exit 1
    fi
    cargo build --release --locked -p lsfs
    bin=${CARGO_TARGET_DIR:-target}/release/lsfs
fi
[[ -x $bin ]] || { echo "install.sh: $bin is not an executable" >&2; exit 1; }

install -d "$prefix/bin" "$sbin" "$man_dir" "$(dirname "$bash_file")" \
    "$(dirname "$zsh_file")" "$(dirname "$fish_file")"
# A copy, not a link: the build tree may go away.
install -m 755 "$bin" "$prefix/bin/lsfs.new"
mv -f "$prefix/bin/lsfs.new" "$prefix/bin/lsfs"
lsfs=$prefix/bin/lsfs
# lsfs recognises the name it runs under (mount.*) and takes mount(8)'s
# helper call: SOURCE DIR [-sfnv] [-o OPTIONS] [-t TYPE].
ln -sfn "$lsfs" "$sbin/mount.fuse.lsfs"
ln -sfn "$lsfs" "$sbin/mount.lsfs"
"$lsfs" man --out "$man_dir" >/dev/null
"$lsfs" completions bash >"$bash_file"
"$lsfs" completions zsh >"$zsh_file"
"$lsfs" completions fish >"$fish_file"

echo "install.sh: installed $("$lsfs" --version) as $lsfs"
echo "  mount(8): $sbin/mount.fuse.lsfs, $sbin/mount.lsfs -> $lsfs"
echo "  man pages: $man_dir/lsfs.1 and lsfs-*.1 (man lsfs, man lsfs-mount)"
echo "  completions: $bash_file, $zsh_file, $fish_file"
echo "Try: mount -t fuse.lsfs disk.img /mnt/x, or in /etc/fstab:"
echo "  /path/disk.img  /mnt/x  fuse.lsfs  defaults,nofail  0  0"
