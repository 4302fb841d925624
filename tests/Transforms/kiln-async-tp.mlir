// RUN: kiln-opt %s -split-input-file -kiln-async-tp | FileCheck %s

// Async TP at tp 2, rank 1 (docs/tp.md, "Async TP"). The gather feeding q
// and k: the rank multiplies its own chunk (1) while the ring brings chunk
// 0 (shift tp - 1 = 1), then chunk 0; each linear's chunk results go back in sequence order
// (chunk 0 at offset 0, chunk 1 after it). The reduce-scatter after o: the
// rank first multiplies its rows of chunk (1 - 0 - 1) = 0 and sends that
// partial sum on, then adds the received partial of its own chunk (1) to
// its rows' product. Each chunk's linear carries its chunk's index for
// kiln-async-tp-grads.
// CHECK-LABEL: func.func @forward_loss(
// CHECK: %[[F:.+]] = kiln.reshape %{{.+}} : tensor<2x1x4xf32> -> tensor<8xf32>
// CHECK-NOT: all_gather_start
// CHECK: %[[S:.+]] = kiln.send_recv_start %[[F]] over tp {ranks = 2 : i64, shift = 1 : i64} : tensor<8xf32>
// CHECK: %[[C0:.+]] = kiln.wait %[[S]] : tensor<8xf32>
// CHECK: %[[X1:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<2x1x4xf32> -> tensor<1x2x4xf32>
// CHECK: %[[Q1:.+]] = kiln.linear wq %[[X1]], %{{.+}} param("q") {kiln.async_chunk = 1 : i64} : tensor<1x2x4xf32>, tensor<6x4xf32> -> tensor<1x2x6xf32>
// CHECK: %[[K1:.+]] = kiln.linear wk %[[X1]], %{{.+}} param("k") {kiln.async_chunk = 1 : i64}
// CHECK: kiln.reshape %[[C0]] : tensor<8xf32> -> tensor<2x1x4xf32>
// CHECK: %[[Q0:.+]] = kiln.linear wq {{.*}} {kiln.async_chunk = 0 : i64}
// CHECK: %[[K0:.+]] = kiln.linear wk {{.*}} {kiln.async_chunk = 0 : i64}
// CHECK: kiln.flatten %{{.+}}, %{{.+}} [0, 12] : tensor<12xf32>, tensor<12xf32> -> tensor<24xf32>
// CHECK: kiln.flatten %{{.+}}, %{{.+}} [0, 4] : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
// CHECK: %[[H:.+]] = kiln.reshape %{{.+}} : tensor<4x1x6xf32> -> tensor<24xf32>
// CHECK: kiln.unflatten %[[H]][0] : tensor<24xf32> -> tensor<2x1x6xf32>
// CHECK: kiln.linear wo {{.*}} {kiln.async_chunk = 0 : i64}
// CHECK: %[[P0:.+]] = kiln.reshape %{{.+}} : tensor<2x1x4xf32> -> tensor<8xf32>
// CHECK-NOT: reduce_scatter_start
// CHECK: %[[T:.+]] = kiln.send_recv_start %[[P0]] over tp {ranks = 2 : i64, shift = 1 : i64} : tensor<8xf32>
// CHECK: %[[R:.+]] = kiln.wait %[[T]] : tensor<8xf32>
// CHECK: kiln.unflatten %[[H]][12] : tensor<24xf32> -> tensor<2x1x6xf32>
// CHECK: kiln.linear wo {{.*}} {kiln.async_chunk = 1 : i64}
// CHECK: %[[P1:.+]] = kiln.reshape %{{.+}} : tensor<2x1x4xf32> -> tensor<8xf32>
// CHECK: %[[SUM:.+]] = kiln.add %[[R]], %[[P1]] : tensor<8xf32>
// CHECK: %[[OUT:.+]] = kiln.reshape %[[SUM]] : tensor<8xf32> -> tensor<2x1x4xf32>
// CHECK: return %[[OUT]]
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {async = true, loss_parallel = false, rank = 1 : i64}} {
func.func @forward_loss(%x: tensor<1x2x4xf32>, %wq: tensor<6x4xf32> {kiln.param = "q"}, %wk: tensor<2x4xf32> {kiln.param = "k"}, %wo: tensor<4x6xf32> {kiln.param = "o"}) -> tensor<2x1x4xf32> {
  %0 = kiln.transpose %x [1, 0, 2] : tensor<1x2x4xf32> -> tensor<2x1x4xf32>
  %1 = kiln.reshape %0 : tensor<2x1x4xf32> -> tensor<8xf32>
  %2 = kiln.all_gather_start %1 over tp {group = "q", ranks = 2 : i64} : tensor<8xf32> -> tensor<16xf32>
  %3 = kiln.wait %2 : tensor<16xf32>
  %4 = kiln.reshape %3 : tensor<16xf32> -> tensor<4x1x4xf32>
  %5 = kiln.transpose %4 [1, 0, 2] : tensor<4x1x4xf32> -> tensor<1x4x4xf32>
  %q = kiln.linear wq %5, %wq param("q") : tensor<1x4x4xf32>, tensor<6x4xf32> -> tensor<1x4x6xf32>
  %k = kiln.linear wk %5, %wk param("k") : tensor<1x4x4xf32>, tensor<2x4xf32> -> tensor<1x4x2xf32>
  %o = kiln.linear wo %q, %wo param("o") : tensor<1x4x6xf32>, tensor<4x6xf32> -> tensor<1x4x4xf32>
  %6 = kiln.transpose %o [1, 0, 2] : tensor<1x4x4xf32> -> tensor<4x1x4xf32>
  %7 = kiln.reshape %6 : tensor<4x1x4xf32> -> tensor<16xf32>
  %8 = kiln.reduce_scatter_start %7 over tp {group = "o", ranks = 2 : i64, reduction = "sum"} : tensor<16xf32> -> tensor<8xf32>
  %9 = kiln.wait %8 : tensor<8xf32>
  %10 = kiln.reshape %9 : tensor<8xf32> -> tensor<2x1x4xf32>
  return %10 : tensor<2x1x4xf32>
}
}

// -----

// tp 4, rank 0: the gather passes chunks to the rank before (shift 3), so
// they arrive in order 0, 1, 2, 3; the scatter passes partial sums to the
// rank after (shift 1): chunks 3, 2, 1, then the rank's own 0, the order
// in which every chunk's sum is folded (ranks j+1, ..., j: docs/tp.md). A
// gather that feeds anything but linears, and a reduce-scatter that is not
// a linear's (the loss's), stay as they are.
// CHECK-LABEL: func.func @forward_loss(
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<4xf32>
// CHECK: kiln.linear wq {{.*}} {kiln.async_chunk = 0 : i64}
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<4xf32>
// CHECK: kiln.linear wq {{.*}} {kiln.async_chunk = 1 : i64}
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<4xf32>
// CHECK: kiln.linear wq {{.*}} {kiln.async_chunk = 2 : i64}
// CHECK-NOT: send_recv_start
// CHECK: kiln.linear wq {{.*}} {kiln.async_chunk = 3 : i64}
// CHECK: kiln.flatten %[[A:.+]], %[[B:.+]], %[[C:.+]], %[[D:.+]] [0, 6, 12, 18]
// CHECK: kiln.unflatten %{{.+}}[18]
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 1 : i64} : tensor<4xf32>
// CHECK: kiln.unflatten %{{.+}}[12]
// CHECK: kiln.add
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 1 : i64} : tensor<4xf32>
// CHECK: kiln.unflatten %{{.+}}[6]
// CHECK: kiln.add
// CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 1 : i64} : tensor<4xf32>
// CHECK: kiln.unflatten %{{.+}}[0]
// CHECK: kiln.add
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "other", ranks = 4 : i64}
// CHECK: kiln.reduce_scatter_start %{{.+}} over tp {group = "other"
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {async = true, loss_parallel = false, rank = 0 : i64}} {
func.func @forward_loss(%x: tensor<1x1x4xf32>, %wq: tensor<6x4xf32> {kiln.param = "q"}, %wo: tensor<4x6xf32> {kiln.param = "o"}) -> (tensor<1x1x4xf32>, tensor<16xf32>, tensor<4xf32>) {
  %0 = kiln.transpose %x [1, 0, 2] : tensor<1x1x4xf32> -> tensor<1x1x4xf32>
  %1 = kiln.reshape %0 : tensor<1x1x4xf32> -> tensor<4xf32>
  %2 = kiln.all_gather_start %1 over tp {group = "q", ranks = 4 : i64} : tensor<4xf32> -> tensor<16xf32>
  %3 = kiln.wait %2 : tensor<16xf32>
  %4 = kiln.reshape %3 : tensor<16xf32> -> tensor<4x1x4xf32>
  %5 = kiln.transpose %4 [1, 0, 2] : tensor<4x1x4xf32> -> tensor<1x4x4xf32>
  %q = kiln.linear wq %5, %wq param("q") : tensor<1x4x4xf32>, tensor<6x4xf32> -> tensor<1x4x6xf32>
  %o = kiln.linear wo %q, %wo param("o") : tensor<1x4x6xf32>, tensor<4x6xf32> -> tensor<1x4x4xf32>
  %6 = kiln.transpose %o [1, 0, 2] : tensor<1x4x4xf32> -> tensor<4x1x4xf32>
  %7 = kiln.reshape %6 : tensor<4x1x4xf32> -> tensor<16xf32>
  %8 = kiln.reduce_scatter_start %7 over tp {group = "o", ranks = 4 : i64, reduction = "sum"} : tensor<16xf32> -> tensor<4xf32>
  %9 = kiln.wait %8 : tensor<4xf32>
  %10 = kiln.reshape %9 : tensor<4xf32> -> tensor<1x1x4xf32>
  %11 = kiln.all_gather_start %9 over tp {group = "other", ranks = 4 : i64} : tensor<4xf32> -> tensor<16xf32>
  %12 = kiln.wait %11 : tensor<16xf32>
  %13 = kiln.reduce_scatter_start %12 over tp {group = "other", ranks = 4 : i64, reduction = "sum"} : tensor<16xf32> -> tensor<4xf32>
  %14 = kiln.wait %13 : tensor<4xf32>
  return %10, %12, %14 : tensor<1x1x4xf32>, tensor<16xf32>, tensor<4xf32>
}
}

// -----

// Without kiln.tp's async (or with async = false), nothing changes.
// CHECK-LABEL: func.func @forward_loss(
// CHECK: kiln.all_gather_start
// CHECK-NOT: send_recv_start
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {async = false, loss_parallel = false, rank = 0 : i64}} {
func.func @forward_loss(%x: tensor<1x2x4xf32>, %wq: tensor<6x4xf32> {kiln.param = "q"}) -> tensor<1x4x6xf32> {
  %0 = kiln.transpose %x [1, 0, 2] : tensor<1x2x4xf32> -> tensor<2x1x4xf32>
  %1 = kiln.reshape %0 : tensor<2x1x4xf32> -> tensor<8xf32>
  %2 = kiln.all_gather_start %1 over tp {group = "q", ranks = 2 : i64} : tensor<8xf32> -> tensor<16xf32>
  %3 = kiln.wait %2 : tensor<16xf32>
  %4 = kiln.reshape %3 : tensor<16xf32> -> tensor<4x1x4xf32>
  %5 = kiln.transpose %4 [1, 0, 2] : tensor<4x1x4xf32> -> tensor<1x4x4xf32>
  %q = kiln.linear wq %5, %wq param("q") : tensor<1x4x4xf32>, tensor<6x4xf32> -> tensor<1x4x6xf32>
  return %q : tensor<1x4x6xf32>
}
}
