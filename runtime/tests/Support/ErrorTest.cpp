//===- ErrorTest.cpp - Error and Expected ------------------------------===//

#include "kiln/Runtime/Support/Error.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

using namespace kiln::runtime;

namespace {

Error failIf(bool fail) {
  if (fail)
    return Error("it failed");
  return Error::success();
}

Error passUp(bool fail) {
  if (Error e = failIf(fail))
    return e;
  return Error::success();
}

Expected<int> half(int n) {
  if (n % 2)
    return Error(std::to_string(n) + " is odd");
  return n / 2;
}

} // namespace

TEST(Error, SuccessIsFalseAndEmpty) {
  Error e;
  EXPECT_FALSE(e);
  EXPECT_EQ(e.message(), "");
  EXPECT_FALSE(Error::success());
  // An empty message is success too.
  EXPECT_FALSE(Error(std::string()));
}

TEST(Error, FailureCarriesItsMessageUp) {
  Error e = passUp(true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e.message(), "it failed");
  EXPECT_FALSE(passUp(false));
}

TEST(Error, TakeMessageLeavesSuccess) {
  Error e("gone");
  EXPECT_EQ(e.takeMessage(), "gone");
  EXPECT_FALSE(e);
}

TEST(Expected, HoldsTheValue) {
  Expected<int> v = half(8);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, 4);
  EXPECT_FALSE(v.error());
}

TEST(Expected, HoldsTheError) {
  Expected<int> v = half(7);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message(), "7 is odd");
  Error e = v.takeError();
  EXPECT_EQ(e.message(), "7 is odd");
}

TEST(Expected, MovesOnlyValuesOut) {
  Expected<std::unique_ptr<int>> v = std::make_unique<int>(3);
  ASSERT_TRUE(v);
  std::unique_ptr<int> p = *std::move(v);
  EXPECT_EQ(*p, 3);
  // A string value and a string message do not mix.
  Expected<std::string> s = std::string("text");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->size(), 4u);
  Expected<std::string> f = Error("no text");
  ASSERT_FALSE(f);
}
