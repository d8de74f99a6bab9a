# Bash completion for ddplaunch and ddpstore; installed under both names in
# share/bash-completion/completions (docs/install.md). Source it by hand with
#   source packaging/ddplaunch-completion.bash
# The options are read from `PROGRAM --help` each time, so they are always the ones the
# installed program has, in both spellings. After ddplaunch's PROGRAM, words belong to the
# program: no ddplaunch options are offered there, only files.

# Prints one line per option name of CLI11's --help: "NAME VALUE [CHOICES...]", VALUE being 1
# when the option takes a value (a type word such as TEXT or INT follows its names) and
# CHOICES the values of a "TEXT:{a,b}" set.
_ddplaunch_help_options() {
  "$1" --help 2>/dev/null | awk '
    /^  +-/ {
      names = $1; value = 0; choices = ""
      # a type word (TEXT, INT, TEXT:{a,b}=a), not a description ("Print this...")
      if ($2 ~ /^[A-Z][A-Z]+([:=].*)?$/) value = 1
      if (match($2, /\{[^}]*\}/)) {
        choices = substr($2, RSTART + 1, RLENGTH - 2); gsub(/,/, " ", choices)
      }
      sub(/\[=[^]]*\]/, "", names)
      n = split(names, list, ",")
      for (i = 1; i <= n; i++) if (list[i] ~ /^-/) print list[i], value, choices
    }'
}

_ddplaunch() {
  local program cur prev table
  program=$(type -P -- "${COMP_WORDS[0]}") || return 0
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=""
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  table=$(_ddplaunch_help_options "$program")
  COMPREPLY=()

  # Skip the options already typed (and their values) to see whether PROGRAM has begun.
  local i=1 word takes
  while ((i < COMP_CWORD)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -* ]]; then
      takes=$(awk -v n="$word" '$1 == n { print $2 }' <<<"$table")
      # "--opt value" takes the next word; "--opt=value" is split by bash at '='.
      if [[ ${COMP_WORDS[i + 1]} == "=" ]]; then
        ((i += 2))
      elif [[ $takes == 1 ]]; then
        ((i += 1))
      fi
    elif [[ $word != "=" ]]; then
      return 0  # PROGRAM [ARGS...]: default (file) completion
    fi
    ((i += 1))
  done

  # A value: "--opt <TAB>", "--opt=<TAB>", "--opt=pre<TAB>".
  local option=""
  if [[ $cur == "=" ]]; then
    option=$prev
    cur=""
  elif [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then
    option=${COMP_WORDS[COMP_CWORD - 2]}
  elif [[ $prev == -* ]]; then
    takes=$(awk -v n="$prev" '$1 == n { print $2 }' <<<"$table")
    [[ $takes == 1 ]] && option=$prev
  fi
  if [[ -n $option ]]; then
    local choices
    choices=$(awk -v n="$option" '$1 == n { $1 = ""; $2 = ""; print }' <<<"$table")
    case $option in
      --nproc_per_node | --nproc-per-node) choices="gpu cpu auto" ;;
      --rdzv_backend | --rdzv-backend) choices="static c10d etcd-v3" ;;
      --numa_binding | --numa-binding) choices="node socket exclusive core-complex" ;;
    esac
    # shellcheck disable=SC2207  # one word per choice
    [[ -n ${choices// /} ]] && COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    return 0  # no choices: default (file) completion
  fi

  if [[ $cur == -* ]]; then
    # shellcheck disable=SC2207
    COMPREPLY=($(compgen -W "$(awk '{ print $1 }' <<<"$table")" -- "$cur"))
  elif [[ -n $cur && ${COMP_WORDS[0]##*/} == ddplaunch ]]; then
    # shellcheck disable=SC2207  # PROGRAM: a command or a file (default completion adds files)
    COMPREPLY=($(compgen -c -- "$cur"))
  fi
  return 0
}

complete -o default -F _ddplaunch ddplaunch ddpstore
