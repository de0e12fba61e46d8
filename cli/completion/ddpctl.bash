# bash completion of ddpctl: its commands and each command's options, from cli/main.c's
# command table (keep in step with it). Installed as
# share/bash-completion/completions/ddpctl; or: source this file.

_ddpctl()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="submit list status cancel delete update logs nodes users groups cluster whoami watch wait help"
    local global="--server --token-file -o --output --help --version"
    local common="--server --token-file -o --output --help"

    case $prev in
    -o | --output)
        COMPREPLY=($(compgen -W "table json name wide" -- "$cur"))
        return
        ;;
    --token-file | --token-out | --download)
        COMPREPLY=($(compgen -f -- "$cur"))
        return
        ;;
    --workdir | --checkpoint-dir)
        COMPREPLY=($(compgen -d -- "$cur"))
        return
        ;;
    --state)
        COMPREPLY=($(compgen -W "PENDING RUNNING RESTARTING CANCELLING SUCCEEDED FAILED CANCELLED" -- "$cur"))
        return
        ;;
    --role)
        COMPREPLY=($(compgen -W "admin user viewer" -- "$cur"))
        return
        ;;
    --preempt-signal)
        COMPREPLY=($(compgen -W "SIGUSR1 SIGUSR2 SIGHUP SIGINT SIGTERM SIGURG SIGWINCH" -- "$cur"))
        return
        ;;
    --server | --name | --nnodes | --nproc-per-node | --max-restarts | --env | --max-runtime | \
        --grace | --hang-timeout | --priority | --node-selector | --preempt-grace | --gpus-per-proc | \
        --idempotency-key | --rank | --tail | --timeout | --reason | --max-slots | --group)
        return
        ;;
    esac

    # The command: the first word that is not an option nor an option's value.
    local i cmd="" cmd_at=0
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
        --server | --token-file | -o | --output) ((i++)) ;;
        -*) ;;
        *)
            cmd=${words[i]}
            cmd_at=$i
            break
            ;;
        esac
    done
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$global" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    local opts=""
    case $cmd in
    submit)
        # after '--' (or the command's first word) comes the job's own argv: files
        for ((i = cmd_at + 1; i < cword; i++)); do
            if [[ ${words[i]} == -- ]]; then
                COMPREPLY=($(compgen -c -f -- "$cur"))
                return
            fi
        done
        opts="--name --nnodes --nproc-per-node --max-restarts --env --workdir --checkpoint-dir
              --max-runtime --grace --hang-timeout --priority --node-selector --preempt-signal
              --preempt-grace --gpus-per-proc --idempotency-key --parsable --"
        ;;
    list) opts="--state --all --no-headers" ;;
    status | cancel | delete | watch | whoami) opts="" ;;
    update) opts="--priority" ;;
    logs) opts="--rank --tail -f --follow --download" ;;
    nodes)
        opts="--no-headers --reason"
        if [[ $cur != -* && $((cword - cmd_at)) -eq 1 ]]; then
            COMPREPLY=($(compgen -W "remove cordon drain uncordon" -- "$cur"))
            return
        fi
        ;;
    users)
        opts="--role --max-slots --group --token-out"
        if [[ $cur != -* && $((cword - cmd_at)) -eq 1 ]]; then
            COMPREPLY=($(compgen -W "list add set remove rotate-token" -- "$cur"))
            return
        fi
        ;;
    groups)
        opts="--max-slots"
        if [[ $cur != -* && $((cword - cmd_at)) -eq 1 ]]; then
            COMPREPLY=($(compgen -W "list set" -- "$cur"))
            return
        fi
        ;;
    cluster)
        opts="--no-headers"
        if [[ $cur != -* && $((cword - cmd_at)) -eq 1 ]]; then
            COMPREPLY=($(compgen -W "status add remove" -- "$cur"))
            return
        fi
        ;;
    wait) opts="--timeout" ;;
    *) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts $common" -- "$cur"))
    fi
}
complete -F _ddpctl ddpctl
