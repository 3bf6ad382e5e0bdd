%% gen_server_bench: the Erlang/OTP counterpart of tycho's tycho.server
%% workloads (bench/lua/memory_server.lua, bench/lua/server_call.lua), with
%% the same shapes: a counter server whose state is a small map #{n => N},
%% `add` by call. bench/erlang/run.sh compiles it into build/erlang/ and
%% bench/run.sh runs it as the peer `erlang` (PEERS=1).
%% Run: erl +S 2:2 -noshell -pa build/erlang -run gen_server_bench main <workload>
%% Prints "RESULT <value> <unit>", "DETAIL k=v ..." and "NOTE text" lines.
-module(gen_server_bench).
-behaviour(gen_server).
-export([main/1]).
-export([init/1, handle_call/3, handle_cast/2]).

-define(MEM_N, 100000).     % memory_server.lua: MEM_N
-define(CALL_N, 300000).    % server_call.lua: CALL_N, per round

%% ---- the server (bench/lua/bench_server.lua) ----
init(N) -> {ok, #{n => N}}.

handle_call({add, K}, _From, S = #{n := N}) ->
    N1 = N + K,
    {reply, N1, S#{n := N1}}.

handle_cast({add, K}, S = #{n := N}) -> {noreply, S#{n := N + K}}.

%% ---- entry ----
main([W]) ->
    try run(list_to_atom(W)) of
        _ -> erlang:halt(0)
    catch C:E:St ->
        io:format(standard_error, "error ~p:~p ~p~n", [C, E, St]),
        erlang:halt(1)
    end.

%% Runs F in a process bound to scheduler Sched (the undocumented spawn_opt
%% {scheduler, N} of erts), waits for its result.
on_scheduler(Sched, F) ->
    Self = self(),
    {Pid, Ref} = spawn_opt(fun() -> Self ! {self(), F()} end,
                           [monitor, {scheduler, Sched}]),
    receive
        {Pid, R} -> erlang:demonitor(Ref, [flush]), R;
        {'DOWN', Ref, process, Pid, Why} -> error({bench_process_died, Why})
    end.

rss_bytes() ->
    {ok, B} = file:read_file("/proc/self/statm"),
    [_, Res | _] = binary:split(B, <<" ">>, [global]),
    binary_to_integer(Res) * 4096.

%% Memory of every process but the caller (whose heap holds the pid list;
%% memory_server.lua allocates its pid table before the baseline).
others_memory() ->
    {memory, Own} = process_info(self(), memory),
    erlang:memory(processes) - Own.

%% ---- memory_server ----
run(memory_server) ->
    {ok, Warm} = gen_server:start(?MODULE, 0, []),
    1 = gen_server:call(Warm, {add, 1}),
    garbage_collect(),
    timer:sleep(50),
    M0 = others_memory(),
    Rss0 = rss_bytes(),
    Pids = [begin {ok, P} = gen_server:start(?MODULE, I, []), P end
            || I <- lists:seq(1, ?MEM_N)],
    %% A call to each: every server has run init and waits, idle.
    lists:foldl(fun(P, I) -> I = gen_server:call(P, {add, 0}), I + 1 end, 1, Pids),
    timer:sleep(100),
    M1 = others_memory(),
    Rss1 = rss_bytes(),
    {memory, One} = process_info(hd(Pids), memory),
    io:format("RESULT ~.1f bytes/server~n", [(M1 - M0) / ?MEM_N]),
    io:format("DETAIL rss_bytes_per_server=~.1f process_info_memory=~w servers=~w~n",
              [(Rss1 - Rss0) / ?MEM_N, One, length(Pids)]),
    io:format("NOTE erlang:memory(processes) delta / N (the caller's own heap"
              " excluded); rss_bytes is the RSS delta / N, what tycho's RESULT is~n");

%% ---- server_call ----
%% Sequential gen_server:call round trips/s against a hand-written
%% receive/reply loop doing the same; two alternating rounds each, the best
%% counts. Caller bound to scheduler 1; the servers on scheduler 1 ("same")
%% or 2 ("cross", RESULT), as server_call.lua places them on its workers.
run(server_call) ->
    Same = on_scheduler(1, fun() -> measure(1) end),
    Cross = on_scheduler(1, fun() -> measure(2) end),
    Free = measure_free(),
    #{srv := CS, hand := CH, srv_cpu := CSc, hand_cpu := CHc} = Cross,
    #{srv := SS, hand := SH, srv_cpu := SSc, hand_cpu := SHc} = Same,
    io:format("RESULT ~.3f roundtrips/s~n", [CS]),
    io:format("DETAIL cross_loop_per_s=~w cross_server_pct=~.1f% same_server_per_s=~w"
              " same_loop_per_s=~w same_server_pct=~.1f% same_server_cpu_pct=~.1f%"
              " cross_server_cpu_pct=~.1f% unbound_server_per_s=~w~n",
              [round(CH), 100 * CS / CH, round(SS), round(SH), 100 * SS / SH,
               100 * SSc / SHc, 100 * CSc / CHc, round(Free)]),
    io:format("NOTE gen_server:call(Server, {add, 1}) vs a receive/reply loop doing"
              " the same; placement by spawn_opt {scheduler, N}~n").

measure(Sched) ->
    {ok, Srv} = gen_server:start(?MODULE, 0, [{spawn_opt, [{scheduler, Sched}]}]),
    Hand = spawn_opt(fun() -> loop(#{n => 0}) end, [{scheduler, Sched}]),
    Best = lists:foldl(
             fun(_, B) ->
                     {H, Hc} = rate(fun(K) -> hand_call(Hand, K) end),
                     {S, Sc} = rate(fun(K) -> gen_server:call(Srv, {add, K}) end),
                     B#{hand := max(H, maps:get(hand, B)),
                        hand_cpu := max(Hc, maps:get(hand_cpu, B)),
                        srv := max(S, maps:get(srv, B)),
                        srv_cpu := max(Sc, maps:get(srv_cpu, B))}
             end, #{hand => 0, hand_cpu => 0, srv => 0, srv_cpu => 0}, [1, 2]),
    Hand ! stop,
    gen_server:stop(Srv),
    Best.

%% One round against a server left where erts puts it (no binding).
measure_free() ->
    {ok, Srv} = gen_server:start(?MODULE, 0, []),
    {R, _} = rate(fun(K) -> gen_server:call(Srv, {add, K}) end),
    gen_server:stop(Srv),
    R.

loop(S = #{n := N}) ->
    receive
        {add, From, Ref, K} -> N1 = N + K, From ! {Ref, N1}, loop(S#{n := N1});
        stop -> ok
    end.

hand_call(P, K) ->
    Ref = make_ref(),
    P ! {add, self(), Ref, K},
    receive {Ref, V} -> V end.

%% Round trips per second of wall time and per second of process CPU time
%% (both schedulers' CPU counts), as server_call.lua's rate().
rate(Call) ->
    {C0, _} = statistics(runtime),
    T0 = erlang:monotonic_time(microsecond),
    Want0 = Call(0),
    rounds(Call, ?CALL_N, Want0),
    Wall = (erlang:monotonic_time(microsecond) - T0) / 1.0e6,
    {C1, _} = statistics(runtime),
    Cpu = max(C1 - C0, 1) / 1000,
    {?CALL_N / Wall, ?CALL_N / Cpu}.

rounds(_Call, 0, _Want) -> ok;
rounds(Call, I, Want) ->
    case Call(1) of
        V when V =:= Want + 1 -> rounds(Call, I - 1, V);
        V -> error({server_call, expected, Want + 1, got, V})
    end.
