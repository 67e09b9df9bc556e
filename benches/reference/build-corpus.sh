#!/usr/bin/env bash
# Build the reference-pages retrieval-benchmark corpus from pinned Debian bookworm packages.
#
#   benches/reference/build-corpus.sh [OUT]   (default: ~/.cache/assist-gateway/reference-corpus)
#
# Downloads the packages below with `apt-get download`, checks their exact versions and
# SHA-256, extracts each one with `dpkg-deb -x` into its own directory, and converts the
# chosen man pages (command manuals, configuration-file references, the C library API)
# in English and Spanish to one Markdown file per page. The converter is mandoc
# (`-T html`, run from the pinned mandoc .deb, no root needed) followed by
# benches/reference/man2md.py (python3 stdlib). A few pages are left out in one
# language on purpose (cross-lingual questions, see README.md). Finally it validates
# benches/reference/questions.jsonl against the result.
# Idempotent: if OUT carries a stamp equal to this script's pins, nothing is done.
# Progress goes to stderr; the last stdout line is the corpus path.
#
# If a pinned version has left the Debian archive, put the pinned .deb files (e.g. from
# snapshot.debian.org) in a directory and set REFERENCE_DEBS=<dir>; they are checked
# against the same SHA-256 pins.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-$HOME/.cache/assist-gateway/reference-corpus}"
STAMP_NAME=".reference-corpus-stamp"

log() { printf '[reference-corpus] %s\n' "$*" >&2; }
die() { printf '[reference-corpus] ERROR: %s\n' "$*" >&2; exit 1; }

# --- pins: package, version, sha256 of the .deb (Debian 12 bookworm, amd64/all) -----------
PINS=(
  "bsdutils|1:2.38.1-5+deb12u3|6cae172b006a4603e710e046c3acba8d98d36748894cbe3eeda31d415fec331e"
  "coreutils|9.1-1|61038f857e346e8500adf53a2a0a20859f4d3a3b51570cc876b153a2d51a3091"
  "cron|3.0pl1-162|c1e12d9c993460e6396107668aa7ba79f8633decebb53aa6c38049584448be3f"
  "diffutils|1:3.8-4|8bdfedc14c1035e3750e9f055ac9c1ecd9b5d05d9e6dc6466c4e9237eef407dd"
  "findutils|4.9.0-4|5dd86bd0af4aa73f067dfd6b8339dd868f2dd84056aa79db29d1206d4fbc5e04"
  "git-man|1:2.39.5-0+deb12u3|904dbd8dbc3db34c6780fb0abfe35816d4a90a490126ef0a055a77a0c5dcab82"
  "grep|3.8-5|3264acea728df3c48a54f20e9291b965130e306b9d00adac76647049da7196df"
  "gzip|1.12-1|eabec1dde2834f72540d7b93fc5df2625f52611c06d93d61f5cdb12480e0e6a3"
  "iproute2|6.1.0-3|1204b29e916e836267096d0b9d778106752f821ebde0d281539008b4386d9070"
  "less|590-2.1~deb12u2|3c4ee8ce5e0f625e1169da9584e309c375a8a68e22de5821461d14446825cc1a"
  "login|1:4.13+dfsg1-1+deb12u2|f1cc45bf505a8457340dc3c36f3a01a1835aaf564d73d9d394afb8ccfb6595a0"
  "mandoc|1.14.6-1+b1|af62386fcb99fbfe8813992d5623f5500339d8decee2c72994522366e078c01b"
  "manpages|6.03-2|efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91"
  "manpages-dev|6.03-2|96f55cb5e26231d5567c89b692bced63825a14a2d5bd18fdf16ea2ed44eb9838"
  "manpages-es|4.18.1-1|d21e9f85e487f149ae45b5c525b2b1a70ae7fd38d4b05b47c8753042c66f4c2b"
  "manpages-es-dev|4.18.1-1|1c2e676050bc87ecd5b4fafa00e7365504aaaf5d64645ef9989e907e5612a322"
  "mount|2.38.1-5+deb12u3|456ed2c62f884bc1133b6969d4d1eb2e6d8581076b00b4c8d700151155270a7a"
  "openssh-client|1:9.2p1-2+deb12u10|42c250b8b9110382488c53c066a960bc564ddac2cb9e449f47b6cdbb5fc1cb60"
  "openssh-server|1:9.2p1-2+deb12u10|933cd92a2329f9bf26d22660a834ae18ebdbe8df9c6127e4d9fcb098dac9cf72"
  "passwd|1:4.13+dfsg1-1+deb12u2|fb787363372903e03627e53fd483e51dfb6861047a1e02c7d5a5f27d66546d08"
  "procps|2:4.0.2-3|d9d0e75779cb79af869181f17b93c5c263a2b89cac6a0193c436160a4483ddc1"
  "psmisc|23.6-1|9d02f654bdf280a6622a9b1371f7a1fa44546702d11991e438558bc259df7b69"
  "rsync|3.2.7-1+deb12u5|7dbc5cb82b8d70c61747819a3ebe397bc4c5f274f266184e557860f1b7a6cafa"
  "sed|4.9-1+deb12u1|fd557efeee8aae4619c2cb7f68aadccb804322ad4a99ab048aaae5901d253885"
  "systemd|252.39-1~deb12u2|286f879c537bfba92e59d580c075ad20ab49020244c79634656850a306dd462b"
  "tar|1.34+dfsg-1.2+deb12u1|24fb92e98c2969171f81a8b589263d705f6b1670f95d121cd74c810d4605acc3"
  "util-linux|2.38.1-5+deb12u3|8eb241ff24b2e1ee9c0373f4fc9bc728b85bf5966c1496154df7da01c0e42f34"
)
# Bump when the selection, the conversion or the layout changes (invalidates stamps).
LAYOUT_VERSION=1

# --- selection ---------------------------------------------------------------------------
# English pages, by package: "group package page page ...". group "man" holds commands
# (sections 1, 8) and configuration files (section 5); group "api" the C library
# (sections 2, 3). For every English page the Spanish translation is taken too when
# manpages-es (man) / manpages-es-dev (api) ships it as a real page (not a .so stub).
# dir(1)/vdir(1) are left out: they repeat ls(1) option for option.
read -r -d '' SELECTION <<'EOF' || true
man coreutils arch.1 b2sum.1 base32.1 base64.1 basename.1 basenc.1 cat.1 chcon.1 chgrp.1 chmod.1
man coreutils chown.1 chroot.8 cksum.1 comm.1 cp.1 csplit.1 cut.1 date.1 dd.1 df.1 dircolors.1 dirname.1 du.1
man coreutils echo.1 env.1 expand.1 expr.1 factor.1 false.1 fmt.1 fold.1 groups.1 head.1 hostid.1 id.1 install.1
man coreutils join.1 link.1 ln.1 logname.1 ls.1 md5sum.1 mkdir.1 mkfifo.1 mknod.1 mktemp.1 mv.1 nice.1 nl.1
man coreutils nohup.1 nproc.1 numfmt.1 od.1 paste.1 pathchk.1 pinky.1 pr.1 printenv.1 printf.1 ptx.1 pwd.1
man coreutils readlink.1 realpath.1 rm.1 rmdir.1 runcon.1 seq.1 sha1sum.1 sha224sum.1 sha256sum.1 sha384sum.1
man coreutils sha512sum.1 shred.1 shuf.1 sleep.1 sort.1 split.1 stat.1 stdbuf.1 stty.1 sum.1 sync.1 tac.1 tail.1
man coreutils tee.1 test.1 timeout.1 touch.1 tr.1 true.1 truncate.1 tsort.1 tty.1 uname.1 unexpand.1 uniq.1
man coreutils unlink.1 users.1 wc.1 who.1 whoami.1 yes.1
man grep grep.1
man diffutils cmp.1 diff.1 diff3.1 sdiff.1
man gzip gzexe.1 gzip.1 zdiff.1 zforce.1 zgrep.1 zless.1 zmore.1 znew.1
man findutils find.1 xargs.1
man sed sed.1
man tar tar.1
man bsdutils logger.1 renice.1 script.1 wall.1
man util-linux ctrlaltdel.8 last.1 mesg.1 mkfs.8 rev.1 setsid.1 sulogin.8
man util-linux blkid.8 chrt.1 dmesg.1 fallocate.1 findmnt.8 flock.1 fstrim.8 getopt.1 ionice.1 lsblk.8 lscpu.1
man util-linux mkswap.8 more.1 namei.1 su.1 taskset.1 whereis.1 wipefs.8
man mount fstab.5 losetup.8 mount.8 swapon.8 umount.8
man manpages getent.1 iconv.1 ldd.1 locale.1 pldd.1 ld.so.8 ldconfig.8 tzselect.8
man manpages dir_colors.5 filesystems.5 group.5 host.conf.5 hosts.5 issue.5 motd.5 networks.5 nologin.5
man manpages protocols.5 securetty.5 services.5 shells.5 termcap.5 utmp.5
man manpages core.5 gai.conf.5 nsswitch.conf.5 resolv.conf.5 tmpfs.5
man openssh-client scp.1 sftp.1 ssh-add.1 ssh-agent.1 ssh-copy-id.1 ssh-keygen.1 ssh-keyscan.1 ssh.1 ssh_config.5
man openssh-server sshd.8 sshd_config.5
man rsync rsync.1 rsyncd.conf.5
man cron cron.8 crontab.1 crontab.5
man procps free.1 kill.1 pgrep.1 pmap.1 ps.1 pwdx.1 sysctl.8 top.1 uptime.1 vmstat.8 w.1 watch.1 sysctl.conf.5
man psmisc fuser.1 killall.1 pstree.1
man less less.1
man iproute2 ip.8 ip-address.8 ip-link.8 ip-neighbour.8 ip-netns.8 ip-route.8 ss.8
man systemd hostnamectl.1 journalctl.1 localectl.1 loginctl.1 systemctl.1 systemd-analyze.1 systemd-cat.1
man systemd systemd-inhibit.1 systemd-run.1 timedatectl.1 systemd-tmpfiles.8
man systemd hostname.5 journald.conf.5 locale.conf.5 logind.conf.5 machine-id.5 modules-load.d.5 os-release.5
man systemd sysctl.d.5 systemd.service.5 systemd.timer.5 systemd.unit.5 tmpfiles.d.5
man git-man git-add.1 git-bisect.1 git-blame.1 git-branch.1 git-cherry-pick.1 git-clean.1 git-clone.1
man git-man git-commit.1 git-diff.1 git-log.1 git-merge.1 git-pull.1 git-push.1 git-rebase.1 git-reflog.1
man git-man git-remote.1 git-reset.1 git-restore.1 git-revert.1 git-stash.1 git-status.1 git-switch.1
man git-man git-tag.1 git-worktree.1 gitattributes.5 githooks.5 gitignore.5 gitmodules.5
man passwd chage.1 chpasswd.8 chsh.1 gpasswd.1 groupadd.8 passwd.1 useradd.8 userdel.8 usermod.8 vipw.8
man passwd passwd.5 shadow.5
man login lastlog.8 login.1 newgrp.1 nologin.8 login.defs.5
api manpages-dev @translated
api manpages-dev accept.2 chmod.2 close.2 dup.2 epoll_create.2 epoll_ctl.2 epoll_wait.2 execve.2 fcntl.2
api manpages-dev fork.2 getrlimit.2 inotify_add_watch.2 kill.2 listen.2 lseek.2 mmap.2 nanosleep.2 open.2
api manpages-dev pipe.2 poll.2 read.2 rename.2 select.2 sigaction.2 signal.2 socket.2 stat.2 umask.2
api manpages-dev unlink.2 wait.2 write.2
api manpages-dev atexit.3 ctime.3 dlopen.3 errno.3 exit.3 fgetc.3 fileno.3 fopen.3 getaddrinfo.3 getcwd.3
api manpages-dev getenv.3 getopt.3 glob.3 malloc.3 mkstemp.3 perror.3 printf.3 pthread_create.3
api manpages-dev pthread_join.3 rand.3 readdir.3 scanf.3 setbuf.3 setlocale.3 strcmp.3 strcpy.3 strerror.3
api manpages-dev strftime.3 strptime.3 strsep.3 strtok.3 strtoul.3 sysconf.3 system.3
EOF
# "@translated": every man2/man3 page of manpages-dev whose Spanish translation exists
# as a real page in manpages-es-dev, except these placeholder pages:
API_SKIP="intro.2 intro.3 undocumented.3 unimplemented.2"
# Spanish pages whose English original is not in the pinned packages (only in Spanish).
ES_ONLY="man1/at.1 man1/bzip2.1 man1/hostname.1 man1/time.1 man8/ifconfig.8 man8/logrotate.8 man8/netstat.8 man8/route.8"
# Pages deliberately left out in one language (group/lang/manN/page), so that questions
# about them asked in the other language can only be answered cross-lingually.
LEFT_OUT=(
  # commands and config only in Spanish (English copy removed)
  man/en/man1/cut.1 man/en/man1/head.1 man/en/man1/mkdir.1 man/en/man1/mktemp.1 man/en/man1/nohup.1
  man/en/man1/paste.1 man/en/man1/rm.1 man/en/man1/seq.1 man/en/man1/stat.1 man/en/man1/tee.1
  man/en/man1/uniq.1 man/en/man1/wc.1 man/en/man5/group.5 man/en/man5/services.5
  # commands and config only in English (Spanish copy removed)
  man/es/man1/chmod.1 man/es/man1/date.1 man/es/man1/df.1 man/es/man1/du.1 man/es/man1/ln.1
  man/es/man1/shred.1 man/es/man1/sort.1 man/es/man1/split.1 man/es/man1/tail.1 man/es/man1/timeout.1
  man/es/man1/touch.1 man/es/man1/zgrep.1 man/es/man5/hosts.5 man/es/man5/shells.5
  # API only in Spanish
  api/en/man3/atof.3 api/en/man3/byteorder.3 api/en/man3/flockfile.3 api/en/man3/getusershell.3
  api/en/man3/memset.3 api/en/man3/mkdtemp.3 api/en/man3/puts.3 api/en/man3/remove.3
  api/en/man3/strspn.3 api/en/man3/strverscmp.3
  # API only in English
  api/es/man2/alarm.2 api/es/man2/bind.2 api/es/man3/daemon.3 api/es/man3/getline.3
  api/es/man3/memcpy.3 api/es/man3/opendir.3 api/es/man3/popen.3 api/es/man3/qsort.3
  api/es/man3/setenv.3 api/es/man3/strstr.3
)

stamp_text() {
  local p
  echo "layout=$LAYOUT_VERSION"
  for p in "${PINS[@]}"; do echo "pin=$p"; done
  printf '%s\n' "$SELECTION" | sha256sum | sed 's/^/selection=/; s/ .*//'
  echo "api_skip=$API_SKIP"
  echo "es_only=$ES_ONLY"
  for p in "${LEFT_OUT[@]}"; do echo "left_out=$p"; done
  echo "man2md=$(sha256sum "$HERE/man2md.py" | cut -d' ' -f1)"
}

# --- idempotence -------------------------------------------------------------------------
if [[ -f "$OUT/$STAMP_NAME" ]] && [[ "$(cat "$OUT/$STAMP_NAME")" == "$(stamp_text)" ]]; then
  log "up to date: $OUT"
  echo "$OUT"
  exit 0
fi
if [[ -e "$OUT" ]] && ! { [[ -d "$OUT" ]] && [[ -z "$(ls -A "$OUT")" ]]; }; then
  if [[ -f "$OUT/$STAMP_NAME" ]]; then
    log "stale corpus (pins or selection changed), rebuilding: $OUT"
  else
    die "$OUT exists but is not a corpus built by this script (no $STAMP_NAME); remove it or pass another OUT"
  fi
fi

for tool in apt-get dpkg-deb python3 sha256sum; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/reference-corpus.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/debs" "$WORK/cache/archives/partial" "$WORK/x"

# --- download ------------------------------------------------------------------------------
specs=()
for p in "${PINS[@]}"; do
  IFS='|' read -r pkg ver _sha <<<"$p"
  if [[ -n "${REFERENCE_DEBS:-}" ]] && compgen -G "$REFERENCE_DEBS/${pkg}_*.deb" >/dev/null; then
    cp "$REFERENCE_DEBS/${pkg}_"*.deb "$WORK/debs/"
  else
    specs+=("$pkg=$ver")
  fi
done
download() {
  (cd "$WORK/debs" && apt-get download -q -o Dir::Cache="$WORK/cache" "${specs[@]}") >&2
}
if [[ ${#specs[@]} -gt 0 ]]; then
  log "downloading ${#specs[@]} packages with apt-get download"
  if ! download; then
    log "apt-get download failed; running apt-get update and retrying"
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -q >&2 || die "apt-get update failed"
    elif command -v sudo >/dev/null; then
      sudo apt-get update -q >&2 || die "apt-get update failed"
    else
      die "apt-get download failed and apt-get update needs root"
    fi
    download || die "apt-get download failed for: ${specs[*]} (are these exact versions still in the archive? bookworm is required; see REFERENCE_DEBS above)"
  fi
fi

# --- verify versions and checksums, extract each package into its own directory ----------
for p in "${PINS[@]}"; do
  IFS='|' read -r pkg ver sha <<<"$p"
  shopt -s nullglob
  debs=("$WORK/debs/${pkg}_"*.deb)
  shopt -u nullglob
  [[ ${#debs[@]} -eq 1 ]] || die "expected one .deb for $pkg, found ${#debs[@]}"
  got_ver="$(dpkg-deb -f "${debs[0]}" Version)"
  [[ "$got_ver" == "$ver" ]] || die "$pkg: version $got_ver downloaded but $ver is pinned (questions.jsonl is only valid for the pinned version)"
  got_sha="$(sha256sum "${debs[0]}" | cut -d' ' -f1)"
  [[ "$got_sha" == "$sha" ]] || die "$pkg $ver: sha256 $got_sha, expected $sha"
  mkdir -p "$WORK/x/$pkg"
  dpkg-deb -x "${debs[0]}" "$WORK/x/$pkg"
done
log "all ${#PINS[@]} packages match their pins"

# mandoc runs from the extracted package (needs only libc6 and zlib1g, both in every
# Debian system). No install, no root.
MANDOC="$WORK/x/mandoc/usr/bin/mandoc"
"$MANDOC" -T ascii </dev/null >/dev/null 2>&1 \
  || die "cannot run the extracted mandoc ($MANDOC); it needs libc6 and zlib1g (apt-get install zlib1g)"

# --- select pages, write the conversion job list ------------------------------------------
STAGE="$WORK/corpus"
mkdir -p "$STAGE"
left_out_file="$WORK/left-out"
printf '%s\n' "${LEFT_OUT[@]}" >"$left_out_file"
printf '%s\n' "$SELECTION" >"$WORK/selection"
python3 - "$WORK/x" "$STAGE" "$WORK/selection" "$left_out_file" "$API_SKIP" "$ES_ONLY" >"$WORK/jobs.tsv" <<'PY'
import gzip, os, sys
x, stage, sel_path, lo_path, api_skip, es_only = sys.argv[1:7]
left_out = set(open(lo_path).read().split())
api_skip = set(api_skip.split())
errors, jobs, seen_lo = [], [], set()

def real_page(path):
    """A regular gzipped man page, not a symlink and not a `.so` redirection stub."""
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with gzip.open(path, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    has_section = any(l.startswith((".SH", ".Sh")) for l in lines)
    return has_section or not any(l.startswith(".so ") for l in lines)

def add(group, lang, page, src):
    name, sec = page.rsplit(".", 1)
    rel = f"{group}/{lang}/man{sec}/{page}"
    if rel in left_out:
        seen_lo.add(rel)
        return
    jobs.append((src, os.path.join(stage, rel + ".md"), f"{name}({sec})"))

es_pkg = {"man": "manpages-es", "api": "manpages-es-dev"}
wanted = []
for line in open(sel_path):
    f = line.split()
    if not f:
        continue
    group, pkg, pages = f[0], f[1], f[2:]
    for page in pages:
        if page == "@translated":
            base = os.path.join(x, pkg, "usr/share/man")
            for sec in ("man2", "man3"):
                for fn in sorted(os.listdir(os.path.join(base, sec))):
                    pg = fn[:-3]
                    if pg in api_skip or not fn.endswith(".gz"):
                        continue
                    if real_page(os.path.join(base, sec, fn)) and real_page(
                            os.path.join(x, es_pkg[group], "usr/share/man/es", sec, fn)):
                        wanted.append((group, pkg, pg))
        else:
            wanted.append((group, pkg, page))
done = set()
for group, pkg, page in wanted:
    if (group, page) in done:
        errors.append(f"page selected twice: {group} {page}")
        continue
    done.add((group, page))
    sec = page.rsplit(".", 1)[1]
    src = os.path.join(x, pkg, "usr/share/man", "man" + sec, page + ".gz")
    if not real_page(src):
        errors.append(f"{pkg}: no real page {src}")
        continue
    add(group, "en", page, src)
    es = os.path.join(x, es_pkg[group], "usr/share/man/es", "man" + sec, page + ".gz")
    if real_page(es):
        add(group, "es", page, es)
for p in es_only.split():
    src = os.path.join(x, "manpages-es", "usr/share/man/es", p + ".gz")
    if not real_page(src):
        errors.append(f"manpages-es: no real page {src}")
    add("man", "es", p.split("/")[1], src)
for rel in sorted(left_out - seen_lo):
    errors.append(f"LEFT_OUT entry matches no selected page: {rel}")
for e in errors:
    print("select: " + e, file=sys.stderr)
if errors:
    sys.exit(1)
for j in sorted(jobs):
    print("\t".join(j))
PY
[[ -s "$WORK/jobs.tsv" ]] || die "page selection failed"
log "converting $(wc -l <"$WORK/jobs.tsv") pages (mandoc -T html + man2md.py); left out: ${#LEFT_OUT[@]}"
python3 "$HERE/man2md.py" "$MANDOC" "$WORK/jobs.tsv" || die "conversion failed"

# Identical rebuilds: fixed mtimes too (content is deterministic already).
find "$STAGE" -exec touch -h -d '2000-01-01 00:00:00 UTC' {} +

# --- validate the questions against the fresh corpus ---------------------------------------
log "checking questions.jsonl"
python3 "$HERE/check-questions.py" "$STAGE" "$HERE/questions.jsonl" >&2 \
  || die "check-questions.py failed against the new corpus"

# --- install -------------------------------------------------------------------------------
stamp_text >"$STAGE/$STAMP_NAME"
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT"
mv "$STAGE" "$OUT"

log "corpus counts:"
for g in man/en/man1 man/en/man8 man/en/man5 man/es/man1 man/es/man8 man/es/man5 \
         api/en/man2 api/en/man3 api/es/man2 api/es/man3; do
  files=$(find "$OUT/$g" -type f | wc -l)
  bytes=$(find "$OUT/$g" -type f -exec cat {} + | wc -c)
  printf '[reference-corpus]   %-14s %4d files %9d bytes\n' "$g" "$files" "$bytes" >&2
done
total_files=$(find "$OUT" -type f ! -name "$STAMP_NAME" | wc -l)
total_bytes=$(find "$OUT" -type f ! -name "$STAMP_NAME" -exec cat {} + | wc -c)
printf '[reference-corpus]   %-14s %4d files %9d bytes\n' "total" "$total_files" "$total_bytes" >&2
echo "$OUT"
