%% ets_bench - the Erlang/OTP counterpart of bench/lua/shared.lua: one ETS
%% table of 100k keys (set, public, read_concurrency and write_concurrency)
%% hammered by 2 processes at once, 90% lookup / 10% insert (and with
%% update_counter in place of insert), for SECONDS each. Run with +S 2:2
%% (bench/shared.sh):
%%   erl +S 2:2 -noshell -pa DIR -run ets_bench main shared
%% prints RESULT <ops/s> ops/s and a DETAIL line (ops per CPU second too).
-module(ets_bench).
-export([main/1]).

-define(KEYS, 100000).

main(_) ->
    Secs = case os:getenv("SHARED_SECONDS") of
               false -> 2;
               S -> list_to_integer(S)
           end,
    T = ets:new(bench, [set, public, {read_concurrency, true},
                        {write_concurrency, true}]),
    Keys = list_to_tuple([list_to_binary("key:" ++ integer_to_list(I))
                          || I <- lists:seq(1, ?KEYS)]),
    [ets:insert(T, {element(I, Keys), I}) || I <- lists:seq(1, ?KEYS)],
    {Set, SetCpu} = run(T, Keys, set, Secs),
    {Incr, IncrCpu} = run(T, Keys, incr, Secs),
    io:format("RESULT ~w ops/s~n", [round(Set)]),
    io:format("DETAIL get_set_ops_cpu_s=~w get_incr_ops_s=~w "
              "get_incr_ops_cpu_s=~w~n", [round(SetCpu), round(Incr), round(IncrCpu)]),
    io:format("NOTE ets set, public, read_concurrency, write_concurrency; "
              "2 processes, 90% lookup / 10% insert (or update_counter)~n"),
    halt(0).

run(T, Keys, Mode, Secs) ->
    Me = self(),
    {Cpu0, _} = erlang:statistics(runtime),
    T0 = erlang:monotonic_time(nanosecond),
    Deadline = T0 + Secs * 1000000000,
    [spawn_opt(fun() -> Me ! {done, loop(T, Keys, Mode, Seed, Deadline, 0)} end,
               [{scheduler, N}]) || {N, Seed} <- [{1, 7919}, {2, 15838}]],
    Total = lists:sum([receive {done, N} -> N end || _ <- [1, 2]]),
    Wall = (erlang:monotonic_time(nanosecond) - T0) / 1.0e9,
    {Cpu1, _} = erlang:statistics(runtime),
    {Total / Wall, Total / max(0.001, (Cpu1 - Cpu0) / 1000)}.

loop(T, Keys, Mode, X, Deadline, N) ->
    X1 = batch(T, Keys, Mode, X, 10000),
    case erlang:monotonic_time(nanosecond) >= Deadline of
        true -> N + 10000;
        false -> loop(T, Keys, Mode, X1, Deadline, N + 10000)
    end.

batch(_, _, _, X, 0) -> X;
batch(T, Keys, Mode, X0, I) ->
    X = (X0 * 1103515245 + 12345) band 16#7FFFFFFF,
    K = element(X rem ?KEYS + 1, Keys),
    case X rem 10 of
        0 when Mode =:= incr -> ets:update_counter(T, K, 1, {K, 0});
        0 -> ets:insert(T, {K, X});
        _ -> ets:lookup(T, K)
    end,
    batch(T, Keys, Mode, X, I - 1).
